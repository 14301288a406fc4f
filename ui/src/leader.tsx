// Who leads: the dashboard asks the server that served it for the cluster's
// overview every few seconds. A leader answers; a standby answers
// NOT_LEADER with the leader's address, which the banner shows, and the
// page then reads the leader's data through its own server, which passes
// the calls on to the leader (/ui/leader/, same origin: the page's policy
// lets it call nothing else).

import { useCallback, useEffect, useState } from "preact/hooks";
import type { GetClusterOverviewResponse } from "../gen/jobplane/v1/dispatcher_service_pb.js";
import { dispatcher, message, needsToken, notLeader, token } from "./api.js";

/** How often the leader is asked again. */
const everyMs = 2000;

/** Where a standby passes the page's calls on to the leader. */
export const leaderProxy = location.origin + "/ui/leader";

export interface Leader {
  /** The overview from the last answer; undefined before one came. */
  overview?: GetClusterOverviewResponse;
  /** Set when the server that served the page is a standby: the leader's address ("" if it does not know). */
  standbyOf?: string;
  /** Where the data comes from: the page's own server, or, on a standby, the leader through it. */
  dataUrl: string;
  /** The last call's error, if it failed. */
  error?: unknown;
  /** The bearer token that call carried ("" for none). */
  errorToken?: string;
  /** Set when the leader changed while the page was open: the previous leader's address. */
  changedFrom?: string;
  /** The last leader known: the one that answered, or the one a standby named. */
  known?: string;
  /** Asks again at once. */
  refresh: () => void;
}

export function useLeader(): Leader {
  const [state, setState] = useState<Omit<Leader, "refresh" | "dataUrl">>({});
  const [tick, setTick] = useState(0);
  const refresh = useCallback(() => setTick((n) => n + 1), []);
  useEffect(() => {
    const ctl = new AbortController();
    const sent = token();
    const opts = { signal: ctl.signal, timeoutMs: 5000 };
    // A change seen: another leader answers than the last one known
    // (from an answer, or named by a standby), whatever failed in
    // between.
    const answered = (overview: GetClusterOverviewResponse, standbyOf?: string) =>
      setState((prev) => {
        const now = overview.leader?.address ?? standbyOf ?? "";
        const changedFrom = prev.known !== undefined && now !== prev.known ? prev.known : prev.changedFrom;
        return { overview, changedFrom, known: now, standbyOf };
      });
    const failed = (error: unknown, standbyOf?: string) => {
      if (ctl.signal.aborted) return;
      setState((prev) => ({
        ...prev,
        overview: standbyOf === undefined ? prev.overview : undefined,
        error,
        errorToken: sent,
        standbyOf,
        known: standbyOf ? standbyOf : prev.known,
      }));
    };
    dispatcher()
      .getClusterOverview({}, opts)
      .then(
        (overview) => answered(overview),
        (error) => {
          const standbyOf = notLeader(error);
          if (standbyOf === undefined) return failed(error);
          if (standbyOf === "") return failed(undefined, standbyOf);
          // A standby that knows the leader: the leader's overview, through it.
          return dispatcher(leaderProxy)
            .getClusterOverview({}, opts)
            .then(
              (overview) => answered(overview, standbyOf),
              (error) => failed(error, standbyOf),
            );
        },
      );
    const t = setTimeout(refresh, everyMs);
    return () => {
      ctl.abort();
      clearTimeout(t);
    };
  }, [tick]);
  const dataUrl = state.standbyOf ? leaderProxy : location.origin;
  return { ...state, dataUrl, refresh };
}

export function LeaderBanner({ leader }: { leader: Leader }) {
  if (leader.standbyOf !== undefined) {
    return (
      <p class="banner standby" role="status">
        This JobManager is a standby.{" "}
        {leader.standbyOf !== "" ? (
          <>
            The leader is <a href={leader.standbyOf + "/ui/"}>{leader.standbyOf}</a>; what this page shows is the
            leader's, read through this JobManager.
          </>
        ) : (
          "It does not know the leader yet."
        )}
        {leader.error !== undefined && !needsToken(leader.error) && (
          <> The leader does not answer through it: {message(leader.error)}</>
        )}
      </p>
    );
  }
  if (leader.error !== undefined && !needsToken(leader.error)) {
    return <p class="banner error" role="alert">The cluster does not answer: {message(leader.error)}</p>;
  }
  if (leader.changedFrom !== undefined) {
    return (
      <p class="banner changed" role="status">
        The leader changed: it was {leader.changedFrom}, it is now {leader.overview?.leader?.address}.
      </p>
    );
  }
  return null;
}
