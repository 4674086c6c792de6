// The console's entry point: idemd serves index.html, which loads this
// bundle (app.js) and app.css, both built by build.mjs.
import "./style.css";
import { render } from "preact";
import { App } from "./app";

const root = document.getElementById("app");
if (root !== null) {
  render(<App />, root);
}
