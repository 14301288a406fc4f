// A subtask's output, followed as it grows: GetTaskOutput from offset 0,
// then from each answer's next_offset, once a second while the attempt
// runs, until it has ended and every byte was read.

import { useEffect, useState } from "preact/hooks";
import { type Dispatcher, message } from "./api.js";

/** Bytes read per call. */
const chunk = 64 << 10;
/** What the panel keeps of a long output: its last bytes. */
const keep = 1 << 20;

export interface Subtask {
  vertexId: string;
  vertexName: string;
  index: number;
}

export function TaskOutput({ client, jobId, subtask }: { client: Dispatcher; jobId: string; subtask: Subtask }) {
  const [text, setText] = useState("");
  const [state, setState] = useState<{ ended: boolean; dropped: bigint; attempt?: number; error?: unknown }>({ ended: false, dropped: 0n });
  useEffect(() => {
    const ctl = new AbortController();
    const decoder = new TextDecoder();
    let offset = 0n;
    let all = "";
    setText("");
    setState({ ended: false, dropped: 0n });
    (async () => {
      while (!ctl.signal.aborted) {
        try {
          const r = await client.getTaskOutput(
            { jobId, vertexId: subtask.vertexId, subtaskIndex: subtask.index, offset, maxBytes: chunk },
            { signal: ctl.signal },
          );
          all = (all + decoder.decode(r.data, { stream: true })).slice(-keep);
          offset = r.nextOffset;
          setText(all);
          setState((s) => ({ ended: r.ended, dropped: s.dropped + r.droppedBytes, attempt: r.attemptNumber }));
          if (r.nextOffset < r.endOffset) continue; // more to read now
          if (r.ended) return;
        } catch (e) {
          if (ctl.signal.aborted) return;
          setState((s) => ({ ...s, error: e }));
        }
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    return () => ctl.abort();
  }, [client, jobId, subtask.vertexId, subtask.index]);
  return (
    <section class="output" aria-label="Task output">
      <h2>
        Output of {subtask.vertexName} #{subtask.index}
        {state.attempt !== undefined && `, attempt ${state.attempt}`}
        {state.ended ? " (ended)" : " (following)"}
      </h2>
      {state.dropped > 0n && <p class="hint">{String(state.dropped)} earlier bytes are no longer kept.</p>}
      {state.error !== undefined && <p class="error" role="alert">{message(state.error)}</p>}
      <pre data-testid="task-output" tabIndex={0}>{text}</pre>
    </section>
  );
}
