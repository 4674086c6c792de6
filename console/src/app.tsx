// The console's frame: signing in, the header (pages, the tenant an
// operator looks at, the refresh interval) and the page of the URL's
// fragment (route.ts). Signing in keeps the address, so a link opened in a
// new tab shows its page once the token is in. Nothing secret goes in the URL.
import { useEffect, useState } from "preact/hooks";
import { fetchServerInfo, forgetToken, isUnauthenticated, savedToken, type ServerInfo, type Session, signIn, SignInError } from "./api";
import { Held } from "./held";
import { Overview, useStats } from "./overview";
import { RecordPage } from "./recordpage";
import { Records } from "./records";
import { formatRoute, navigate, NO_QUERY, type Page, type Route, useRoute } from "./route";
import { REFRESH_CHOICES, useNow } from "./ui";

/** Scope is whose records the pages show: the caller's own, one tenant's, or all (operators). */
export interface Scope {
  tenant: string;
  all: boolean;
}

export function App() {
  const [info, setInfo] = useState<ServerInfo | undefined>(undefined);
  const [infoError, setInfoError] = useState<string>("");
  const [session, setSession] = useState<Session | undefined>(undefined);
  const [signInError, setSignInError] = useState<string>("");
  const [restoring, setRestoring] = useState(true);

  useEffect(() => {
    fetchServerInfo().then(
      async (i) => {
        setInfo(i);
        const token = i.authentication === "none" ? "" : savedToken();
        if (token !== null) {
          try {
            setSession(await signIn(token, i));
          } catch (err) {
            forgetToken();
            setSignInError(err instanceof Error ? err.message : String(err));
          }
        }
        setRestoring(false);
      },
      (err: unknown) => {
        setInfoError(err instanceof Error ? err.message : String(err));
        setRestoring(false);
      },
    );
  }, []);

  const signOut = (why = "") => {
    forgetToken();
    setSession(undefined);
    setSignInError(why);
  };

  if (infoError !== "") {
    return (
      <main class="signin">
        <div class="error" role="alert">
          The console could not reach idemd: {infoError}
        </div>
      </main>
    );
  }
  if (info === undefined || restoring) {
    return <main class="signin muted">Loading…</main>;
  }
  return (
    <>
      {info.authentication === "none" ? (
        <div class="banner" role="alert" data-testid="no-auth-banner">
          This idemd runs without authentication (no <code>--config</code>): anyone who can reach {window.location.host} can read, resolve and delete every record.
        </div>
      ) : null}
      {session ? (
        <Console session={session} info={info} signOut={signOut} />
      ) : (
        <SignIn
          info={info}
          error={signInError}
          onSignIn={async (token) => {
            setSignInError("");
            try {
              setSession(await signIn(token, info));
            } catch (err) {
              setSignInError(err instanceof SignInError || err instanceof Error ? err.message : String(err));
            }
          }}
        />
      )}
    </>
  );
}

function SignIn({ info, error, onSignIn }: { info: ServerInfo; error: string; onSignIn: (token: string) => Promise<void> }) {
  const [token, setToken] = useState("");
  const [busy, setBusy] = useState(false);
  return (
    <main class="signin">
      <h1>idem console</h1>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setBusy(true);
          await onSignIn(token.trim());
          setBusy(false);
        }}
      >
        <label for="token">Token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          spellcheck={false}
          value={token}
          placeholder={info.client_certificates ? "leave empty to use your client certificate" : "paste a token"}
          onInput={(e) => setToken((e.target as HTMLInputElement).value)}
          autofocus
        />
        <p class="muted small">
          A token of a tenant with <code>admin: true</code> (its own records) or <code>operator: true</code> (every tenant's) in idemd's config, as{" "}
          <code>idemd token new</code> printed it. It stays in this tab (sessionStorage) until you sign out or close the tab, and goes to this idemd only, as an{" "}
          <code>Authorization</code> header.
        </p>
        {error ? (
          <div class="error" role="alert" data-testid="signin-error">
            {error}
          </div>
        ) : null}
        <button type="submit" class="primary" disabled={busy || (token.trim() === "" && !info.client_certificates)}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

/** NAV are the pages the header links to; a record's page is reached from the others. */
const NAV: { page: Exclude<Page, "record">; label: string }[] = [
  { page: "overview", label: "Overview" },
  { page: "records", label: "Records" },
  { page: "held", label: "Held" },
];

/** navRoute is a page of the header, fresh, for the tenant the operator looks at. */
function navRoute(page: Exclude<Page, "record">, tenant: string): Route {
  switch (page) {
    case "overview":
      return { page, tenant };
    case "records":
      return { page, tenant, query: NO_QUERY };
    case "held":
      return { page, tenant, namespace: "" };
  }
}

function Console({ session, info, signOut }: { session: Session; info: ServerInfo; signOut: (why?: string) => void }) {
  const route = useRoute();
  // An operator looks at every tenant unless the address names one; a
  // tenant's admin sees its own, whatever the address says.
  const scope: Scope = session.role === "operator" ? { tenant: route.tenant, all: route.tenant === "" } : { tenant: "", all: false };
  const [intervalMs, setIntervalMs] = useState(10_000);
  const [tenants, setTenants] = useState<string[]>(session.tenants);
  const now = useNow();

  const onError = (err: unknown) => {
    if (isUnauthenticated(err)) {
      signOut("idemd no longer accepts this token: sign in again.");
    }
  };
  const stats = useStats(session, scope, route.page === "overview" ? intervalMs : 0, onError);
  useEffect(() => {
    if (scope.all && stats.data) {
      const seen = new Set([...tenants, ...stats.data.map((r) => r.tenant)]);
      if (seen.size !== tenants.length) {
        setTenants([...seen].sort());
      }
    }
  }, [stats.data]);
  const pickTenant = (tenant: string) => {
    // A record belongs to one tenant: picking another shows that tenant's records.
    navigate(route.page === "record" ? navRoute("records", tenant) : route.page === "records" ? { ...route, tenant, query: { ...route.query, after: "" } } : { ...route, tenant });
  };

  const role =
    session.role === "open" ? "no authentication (tenant default)" : session.role === "operator" ? "operator" : `tenant ${session.tenant || "(own)"}`;
  const who = session.callerName ? `${session.callerName} (${role})` : role;
  const scopeTenant = session.role === "operator" ? route.tenant : "";
  return (
    <div class="app">
      <header class="top">
        <a class="brand" href={formatRoute(navRoute("overview", scopeTenant))}>
          idem
        </a>
        <nav>
          {NAV.map(({ page, label }) => (
            <a key={page} href={formatRoute(navRoute(page, scopeTenant))} class={route.page === page ? "active" : ""} aria-current={route.page === page ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <div class="controls">
          {session.role === "operator" ? (
            <label>
              <span class="label">Tenant</span>
              <select name="tenant" data-testid="tenant-picker" value={scope.all ? "*" : scope.tenant} onChange={(e) => pickTenant((e.target as HTMLSelectElement).value.replace(/^\*$/, ""))}>
                <option value="*">all tenants</option>
                {[...new Set([...tenants, ...(scope.all ? [] : [scope.tenant])])].sort().map((t) => (
                  <option key={t} value={t}>
                    {t}
                  </option>
                ))}
              </select>
            </label>
          ) : null}
          <label>
            <span class="label">Refresh</span>
            <select name="refresh" value={String(intervalMs)} onChange={(e) => setIntervalMs(Number((e.target as HTMLSelectElement).value))}>
              {REFRESH_CHOICES.map((ms) => (
                <option key={ms} value={String(ms)}>
                  {ms === 0 ? "paused" : `every ${ms / 1000} s`}
                </option>
              ))}
            </select>
          </label>
          <span class="who" data-testid="who">
            {who}
          </span>
          {info.authentication === "none" ? null : (
            <button type="button" onClick={() => signOut()}>
              Sign out
            </button>
          )}
        </div>
      </header>
      <main class="page">
        {route.page === "overview" ? (
          <Overview session={session} scope={scope} route={route} stats={stats} now={now} />
        ) : route.page === "records" ? (
          <Records session={session} scope={scope} route={route} namespaces={session.namespaces} now={now} intervalMs={intervalMs} onError={onError} />
        ) : route.page === "record" ? (
          <RecordPage session={session} route={route} now={now} intervalMs={intervalMs} onError={onError} />
        ) : (
          <Held session={session} scope={scope} route={route} now={now} intervalMs={intervalMs} onError={onError} />
        )}
      </main>
    </div>
  );
}
