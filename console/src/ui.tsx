// Pieces every page uses: times, errors, dialogs, and data that refreshes
// itself.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { describe } from "./api";
import { relative, utc } from "./format";

/** useNow is the current time, updated every second, for relative times. */
export function useNow(): Date {
  const [now, setNow] = useState(() => new Date());
  useEffect(() => {
    const id = window.setInterval(() => setNow(new Date()), 1000);
    return () => window.clearInterval(id);
  }, []);
  return now;
}

/** dateOf converts a protobuf Timestamp; undefined stays undefined. */
export function dateOf(ts: Timestamp | undefined): Date | undefined {
  return ts === undefined ? undefined : timestampDate(ts);
}

/** Time shows an absolute time in UTC and how long ago (or until) it is. */
export function Time({ at, now, empty = "—" }: { at: Timestamp | Date | undefined; now: Date; empty?: string }) {
  const d = at instanceof Date ? at : dateOf(at);
  if (d === undefined) {
    return <span class="muted">{empty}</span>;
  }
  return (
    <time dateTime={d.toISOString()} title={utc(d)}>
      <span class="abs">{utc(d)}</span> <span class="rel">({relative(d, now)})</span>
    </time>
  );
}

/** Ago shows only how long ago a time is, the absolute time on hover. */
export function Ago({ at, now }: { at: Timestamp | Date | undefined; now: Date }) {
  const d = at instanceof Date ? at : dateOf(at);
  if (d === undefined) {
    return <span class="muted">—</span>;
  }
  return (
    <time dateTime={d.toISOString()} title={utc(d)}>
      {relative(d, now)}
    </time>
  );
}

export function ErrorBox({ error, title }: { error: unknown; title?: string }) {
  if (error === undefined || error === null) {
    return null;
  }
  return (
    <div class="error" role="alert">
      {title ? <strong>{title}: </strong> : null}
      {describe(error)}
    </div>
  );
}

/** REFRESH_CHOICES are the auto-refresh intervals the header offers, in ms; 0 pauses. */
export const REFRESH_CHOICES = [0, 2000, 5000, 10000, 30000];

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  refreshedAt: Date | undefined;
  reload: () => void;
}

/**
 * useLoad runs load when deps change and again every intervalMs (0: only
 * then and on reload), keeping the last data while a refresh runs. It
 * does not refresh while the tab is hidden, and refreshes at once when it
 * is shown again, so that a person back at the tab sees what changed. An
 * answer that arrives after a newer load started is dropped.
 */
export function useLoad<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], intervalMs: number, onError?: (err: unknown) => void): Loaded<T> {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean; refreshedAt: Date | undefined }>({
    data: undefined,
    error: undefined,
    loading: true,
    refreshedAt: undefined,
  });
  const seq = useRef(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  const run = useCallback(() => {
    const mine = ++seq.current;
    const ctl = new AbortController();
    setState((s) => ({ ...s, loading: true }));
    loadRef.current(ctl.signal).then(
      (data) => {
        if (mine === seq.current) {
          setState({ data, error: undefined, loading: false, refreshedAt: new Date() });
        }
      },
      (error: unknown) => {
        if (mine === seq.current) {
          setState((s) => ({ ...s, error, loading: false }));
          onError?.(error);
        }
      },
    );
    return ctl;
  }, []);
  useEffect(() => {
    setState({ data: undefined, error: undefined, loading: true, refreshedAt: undefined });
    const ctl = run();
    return () => ctl.abort();
  }, deps);
  useEffect(() => {
    if (intervalMs <= 0) {
      return;
    }
    const id = window.setInterval(() => {
      if (document.visibilityState === "visible") {
        run();
      }
    }, intervalMs);
    const shown = () => {
      if (document.visibilityState === "visible") {
        run();
      }
    };
    document.addEventListener("visibilitychange", shown);
    return () => {
      window.clearInterval(id);
      document.removeEventListener("visibilitychange", shown);
    };
  }, [intervalMs, run]);
  return { ...state, reload: () => void run() };
}

/**
 * Dialog is a modal <dialog>: Escape or Cancel closes it unless busy, and
 * focus stays inside while it is open.
 */
export function Dialog({ title, onClose, busy = false, children, testid }: { title: string; onClose: () => void; busy?: boolean; children: ComponentChildren; testid?: string }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) {
      d.showModal();
    }
    return () => d?.close();
  }, []);
  return (
    <dialog
      ref={ref}
      class="dialog"
      data-testid={testid}
      aria-labelledby="dialog-title"
      onCancel={(e) => {
        e.preventDefault();
        if (!busy) {
          onClose();
        }
      }}
    >
      <h2 id="dialog-title">{title}</h2>
      {children}
    </dialog>
  );
}

/**
 * copyText puts text on the clipboard: the Clipboard API where the page may
 * use it (https, or localhost), else the older copy command on a selection,
 * which also works on an idemd reached over plain http.
 */
export async function copyText(text: string): Promise<void> {
  if (window.isSecureContext && navigator.clipboard) {
    try {
      await navigator.clipboard.writeText(text);
      return;
    } catch {
      // denied: try the copy command
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "offscreen";
  // Inside an open modal dialog, only the dialog's content can be selected.
  (document.querySelector("dialog[open]") ?? document.body).appendChild(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) {
    throw new Error("the browser refused to copy");
  }
}

/** CopyButton copies text, and says for a moment that it did (or could not). */
export function CopyButton({ text, what }: { text: string; what: string }) {
  const [said, setSaid] = useState<"" | "Copied" | "Copy failed">("");
  useEffect(() => {
    if (said === "") {
      return;
    }
    const id = window.setTimeout(() => setSaid(""), 2000);
    return () => window.clearTimeout(id);
  }, [said]);
  return (
    <button
      type="button"
      class="copy"
      aria-label={`Copy ${what}`}
      title={`Copy the ${what}`}
      onClick={() =>
        copyText(text).then(
          () => setSaid("Copied"),
          () => setSaid("Copy failed"),
        )
      }
    >
      <span aria-live="polite">{said || "Copy"}</span>
    </button>
  );
}
