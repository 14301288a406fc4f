// A job's checkpoints and savepoints: the counts and the latest from the
// job's details, the checkpoints it keeps (ListCheckpoints) and its
// savepoints (ListSavepoints), read every two seconds while the job runs;
// and taking a savepoint, or stopping the job with one, after a
// confirmation.

import { useState } from "preact/hooks";
import type { CheckpointInfo, CheckpointStats } from "../gen/jobplane/v1/checkpoint_pb.js";
import { type Dispatcher, duration, message, time } from "./api.js";
import { usePoll } from "./poll.js";

function bytes(n: bigint): string {
  const v = Number(n);
  if (v < 1024) return `${v} B`;
  if (v < 1 << 20) return `${(v / 1024).toFixed(1)} KiB`;
  return `${(v / (1 << 20)).toFixed(1)} MiB`;
}

function Row({ c }: { c: CheckpointInfo }) {
  return (
    <>
      <td>{String(c.checkpointId)}</td><td>{time(c.triggerTime)}</td><td>{duration(c.triggerTime, c.ackTime)}</td>
      <td>{bytes(c.stateBytes)}</td><td>{c.subtaskStates}</td>
    </>
  );
}

export function Checkpoints({ client, jobId, stats, running }: { client: Dispatcher; jobId: string; stats?: CheckpointStats; running: boolean }) {
  const [tick, setTick] = useState(0);
  const [taken, setTaken] = useState<string>();
  const [error, setError] = useState<unknown>();
  const list = usePoll(
    async (signal) => {
      const [cps, sps] = await Promise.all([
        client.listCheckpoints({ jobId }, { signal }),
        client.listSavepoints({ jobId, pageSize: 50 }, { signal }),
      ]);
      return { checkpoints: cps.checkpoints, stats: cps.stats, savepoints: sps.savepoints };
    },
    running ? 2000 : undefined, // an ended job's are read once
    [client, jobId, running, tick],
  );
  const s = list.value?.stats ?? stats;
  const savepoint = async (stop: boolean) => {
    const what = stop ? `Stop job ${jobId} with a savepoint?` : `Take a savepoint of job ${jobId}?`;
    if (!confirm(what)) return;
    setError(undefined);
    try {
      const r = await client.triggerSavepoint({ jobId, stop });
      setTaken(r.savepoint?.savepointId);
      setTick((n) => n + 1);
    } catch (e) {
      setError(e);
    }
  };
  return (
    <section aria-label="Checkpoints">
      <h2>Checkpoints</h2>
      {s !== undefined && (
        <dl class="counts" data-testid="checkpoint-counts">
          <dt>completed</dt><dd>{String(s.counts?.completed ?? 0n)}</dd>
          <dt>failed</dt><dd>{String(s.counts?.failed ?? 0n)}</dd>
          <dt>triggered</dt><dd>{String(s.counts?.triggered ?? 0n)}</dd>
          {s.inProgressId !== 0n && (<><dt>in progress</dt><dd>{String(s.inProgressId)}</dd></>)}
          {s.restoredFrom !== "" && (<><dt>restored from</dt><dd class="mono">{s.restoredFrom}</dd></>)}
        </dl>
      )}
      {list.error !== undefined && <p class="error" role="alert">{message(list.error)}</p>}
      {(list.value?.checkpoints.length ?? 0) > 0 && (
        <table aria-label="Kept checkpoints">
          <thead><tr><th>Checkpoint</th><th>Triggered</th><th>Took</th><th>State</th><th>Subtask states</th></tr></thead>
          <tbody>{list.value!.checkpoints.map((c) => <tr key={String(c.checkpointId)}><Row c={c} /></tr>)}</tbody>
        </table>
      )}
      <h2>Savepoints</h2>
      {running && (
        <p class="actions">
          <button onClick={() => savepoint(false)}>Take savepoint</button>{" "}
          <button class="danger" onClick={() => savepoint(true)}>Stop with savepoint</button>
        </p>
      )}
      {taken !== undefined && <p role="status">Savepoint <span class="mono">{taken}</span> taken.</p>}
      {error !== undefined && <p class="error" role="alert">{message(error)}</p>}
      {(list.value?.savepoints.length ?? 0) === 0 ? (
        <p>None.</p>
      ) : (
        <table aria-label="Savepoints">
          <thead><tr><th>Savepoint</th><th>Checkpoint</th><th>Triggered</th><th>Took</th><th>State</th><th>Subtask states</th></tr></thead>
          <tbody>
            {list.value!.savepoints.map((sp) => (
              <tr key={sp.savepointId}>
                <td class="mono">{sp.savepointId}</td>
                {sp.checkpoint !== undefined ? <Row c={sp.checkpoint} /> : <td colSpan={5}>—</td>}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
