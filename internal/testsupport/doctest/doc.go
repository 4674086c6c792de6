// Package doctest runs the commands that README.md and docs/*.md show, so
// that none of them goes stale: its tests extract the fenced shell blocks of
// every page, run them against a real idemd and the idem CLI, and compare
// what they print with what the page says they print. The convention a page
// follows is in docs/development.md ("The commands in these pages are
// tested"). The package has no code of its own; it is all in its tests.
package doctest
