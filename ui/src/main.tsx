// The dashboard: one page, routed by the URL's fragment (#/cluster,
// #/jobs, #/jobs/<id>), drawn with preact from the answers of the public
// DispatcherService.

import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import { dispatcher, needsToken, setToken, token } from "./api.js";
import { ClusterPage } from "./cluster.js";
import { JobPage } from "./job.js";
import { JobsPage } from "./jobs.js";
import { LeaderBanner, useLeader } from "./leader.js";
import { SubmitPage } from "./submit.js";
import "./style.css";

/** A route: the page the fragment names. */
type Route = { page: "cluster" } | { page: "jobs" } | { page: "job"; id: string } | { page: "submit" };

function parse(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "jobs" && parts[1]) return { page: "job", id: parts[1] };
  if (parts[0] === "jobs") return { page: "jobs" };
  if (parts[0] === "submit") return { page: "submit" };
  return { page: "cluster" };
}

function useRoute(): Route {
  const [route, setRoute] = useState(parse(location.hash));
  useEffect(() => {
    const on = () => setRoute(parse(location.hash));
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}

/** TokenForm asks for the bearer token once; it is kept for the browser session. */
function TokenForm({ refused, onDone }: { refused: boolean; onDone: () => void }) {
  const [value, setValue] = useState("");
  return (
    <form
      class="token"
      onSubmit={(e) => {
        e.preventDefault();
        setToken(value.trim());
        onDone();
      }}
    >
      <h2>This cluster asks who you are</h2>
      {refused && <p class="error" role="alert">The cluster refused the token given.</p>}
      <label>
        Bearer token
        <input type="password" autocomplete="off" value={value} onInput={(e) => setValue(e.currentTarget.value)} autofocus />
      </label>
      <button type="submit">Use this token</button>
      <p class="hint">It is kept in this browser tab's session only, and sent with every call.</p>
    </form>
  );
}

function App() {
  const route = useRoute();
  const leader = useLeader();
  const [, setTokenChanged] = useState(0);
  // One client per data source: a new one would restart every read and
  // watch of the page.
  const client = useMemo(() => dispatcher(leader.dataUrl), [leader.dataUrl]);

  if (needsToken(leader.error)) {
    return (
      <main>
        <TokenForm
          refused={leader.errorToken !== "" && leader.errorToken === token()}
          onDone={() => { setTokenChanged((n) => n + 1); leader.refresh(); }}
        />
      </main>
    );
  }
  const nav = (href: string, label: string, active: boolean) => (
    <a href={href} aria-current={active ? "page" : undefined}>{label}</a>
  );
  return (
    <>
      <header>
        <a class="brand" href="#/cluster">jobplane</a>
        <nav aria-label="Pages">
          {nav("#/cluster", "Cluster", route.page === "cluster")}
          {nav("#/jobs", "Jobs", route.page === "jobs" || route.page === "job")}
          {nav("#/submit", "Submit", route.page === "submit")}
        </nav>
        {token() !== "" && (
          <button class="link" onClick={() => { setToken(""); location.reload(); }}>Forget token</button>
        )}
      </header>
      <LeaderBanner leader={leader} />
      <main>
        {route.page === "cluster" && <ClusterPage client={client} overview={leader.overview} />}
        {route.page === "jobs" && <JobsPage client={client} />}
        {route.page === "job" && <JobPage client={client} id={route.id} />}
        {route.page === "submit" && <SubmitPage client={client} />}
      </main>
    </>
  );
}

const root = document.getElementById("app")!;
root.textContent = ""; // the "Loading" line of index.html
render(<App />, root);
