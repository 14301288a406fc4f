import { useEffect, useState } from "preact/hooks";

/** The state of a value read from the cluster. */
export interface Read<T> {
  value?: T;
  error?: unknown;
}

/**
 * usePoll calls read now and, unless everyMs is undefined, again everyMs
 * after each answer, until the component goes or deps change; a call in
 * flight is aborted then.
 */
export function usePoll<T>(read: (signal: AbortSignal) => Promise<T>, everyMs: number | undefined, deps: unknown[]): Read<T> {
  const [state, setState] = useState<Read<T>>({});
  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const once = () => {
      read(ctl.signal).then(
        (value) => !ctl.signal.aborted && setState({ value }),
        (error) => !ctl.signal.aborted && setState((prev) => ({ ...prev, error })),
      ).finally(() => {
        if (!ctl.signal.aborted && everyMs !== undefined) timer = setTimeout(once, everyMs);
      });
    };
    once();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
  }, deps);
  return state;
}
