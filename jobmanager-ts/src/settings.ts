// The process's settings from its flags, read where they are used: the task
// lease it grants, and the authorities it trusts for its own https calls.
import type { ConnectTransportOptions } from "@connectrpc/connect-node";

export const SETTINGS: {
  /** ServerTimings.task_lease: how long TaskExecutors keep attempts running for a new JobMaster to adopt; 0 for none. */
  taskLeaseMs: number;
  /** PEM authorities (--tls-ca) trusted for the process's calls to https addresses (HA store, TaskExecutors). */
  tlsCa: Buffer | undefined;
} = { taskLeaseMs: 3000, tlsCa: undefined };

/** The options of a client transport to `baseUrl`: Connect, binary, HTTP/2 (h2c, or TLS for https). */
export function transportOptions(baseUrl: string): ConnectTransportOptions {
  const tls = baseUrl.startsWith("https://") && SETTINGS.tlsCa ? { ca: SETTINGS.tlsCa } : undefined;
  return { baseUrl, httpVersion: "2", useBinaryFormat: true, ...(tls ? { nodeOptions: tls } : {}) };
}

const UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A duration as Go writes it (`10s`, `1.5s`, `500ms`, `1m30s`; `0` alone), in milliseconds; undefined if malformed. */
export function parseDurationMs(s: string): number | undefined {
  if (s === "0") return 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/y;
  let total = 0;
  let i = 0;
  if (s.length === 0) return undefined;
  while (i < s.length) {
    re.lastIndex = i;
    const m = re.exec(s);
    if (!m) return undefined;
    total += Number(m[1]) * UNITS[m[2]!]!;
    i = re.lastIndex;
  }
  return total;
}
