// Task output, as the reference (Go) TaskExecutor keeps it
// (sdk/taskexecutor/output.go and outputdisk.go). Each execution attempt
// writes its output (the lines Task.log logs and the bytes written to
// Task.output) into a buffer of its own that keeps the tail: the last
// outputBytes bytes, while offsets count every byte written. Once the
// attempt ended, its buffer is kept for outputRetentionMs, and among the
// last outputAttempts attempts that ended; then it is forgotten. Nothing
// wakes up to forget it: expired buffers are dropped when an attempt
// starts or ends and when output is read. With an output directory, the
// outputs are files on disk instead, bounded by outputMaxBytes; a worker
// started on a directory serves the outputs found there as ended attempts.
//
// Nothing here knows of RPCs: worker.ts translates GetTaskOutput.

import { closeSync, mkdirSync, openSync, readdirSync, readSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";

/** The tail of an attempt's output kept by default: 64 KiB. */
export const DEFAULT_OUTPUT_BYTES = 64 << 10;
/** How long an ended attempt's output is kept in memory by default: 10 minutes. */
export const DEFAULT_OUTPUT_RETENTION_MS = 10 * 60_000;
/** How many ended attempts' outputs are kept in memory by default: 512. */
export const DEFAULT_OUTPUT_ATTEMPTS = 512;
/** How long an ended attempt's output is kept on disk by default: 24 hours. */
export const DEFAULT_OUTPUT_DISK_RETENTION_MS = 24 * 3_600_000;
/** The bytes the outputs take on disk at most by default: 256 MiB. */
export const DEFAULT_OUTPUT_MAX_BYTES = 256 << 20;

/** Bounds of one GetTaskOutput answer. */
export const DEFAULT_OUTPUT_READ = 64 << 10;
export const MAX_OUTPUT_READ = 1 << 20;

/** What a file counts for at least, and the unit its size is rounded up to, against outputMaxBytes. */
const outputBlock = 4096;
/** Ends the name of every output file. */
const outputSuffix = ".out";
/** Bounds an output file's name; an attempt whose name would be longer keeps its output in memory. */
const maxOutputName = 240;
/** The write buffer of a running attempt on disk. */
const outputBufferBytes = 4096;

/** OutputKey identifies an attempt's output. */
export interface OutputKey {
  jobId: string;
  vertexId: string;
  subtask: number;
  attempt: number;
}

function keyString(k: OutputKey): string {
  return JSON.stringify([k.jobId, k.vertexId, k.subtask, k.attempt]);
}

const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64url");

/**
 * outputName returns the name of the file holding the segment of the
 * attempt's output that starts at offset start. The ids are written in
 * unpadded base64url, whose alphabet holds no path separator nor dot:
 * whatever the ids, the name stays a plain file name inside the
 * directory. It returns "" when the name would be too long. The names
 * are those the Go TaskExecutor uses.
 */
export function outputName(k: OutputKey, start: number): string {
  const name = `${b64(k.jobId)}.${b64(k.vertexId)}.${k.subtask}.${k.attempt}.${start}${outputSuffix}`;
  return name.length > maxOutputName ? "" : name;
}

/** parseOutputName is the inverse of outputName; undefined for any other name. */
export function parseOutputName(name: string): { key: OutputKey; start: number } | undefined {
  if (!name.endsWith(outputSuffix)) return undefined;
  const parts = name.slice(0, -outputSuffix.length).split(".");
  if (parts.length !== 5) return undefined;
  if (!/^[A-Za-z0-9_-]+$/.test(parts[0]) || !/^[A-Za-z0-9_-]*$/.test(parts[1])) return undefined;
  if (!parts.slice(2).every((p) => /^-?[0-9]+$/.test(p))) return undefined;
  const key: OutputKey = {
    jobId: Buffer.from(parts[0], "base64url").toString("utf8"),
    vertexId: Buffer.from(parts[1], "base64url").toString("utf8"),
    subtask: Number(parts[2]),
    attempt: Number(parts[3]),
  };
  const start = Number(parts[4]);
  if (key.jobId === "" || start < 0 || !Number.isSafeInteger(start)) return undefined;
  if (outputName(key, start) !== name) return undefined; // not in the canonical form
  return { key, start };
}

/** diskBytes is what a file of size bytes counts for against outputMaxBytes. */
function diskBytes(size: number): number {
  return Math.max(Math.ceil(size / outputBlock) * outputBlock, outputBlock);
}

interface Segment {
  start: number;
  size: number;
}

/** Counter is the bytes all the outputs take on disk, shared by them. */
interface Counter {
  used: number;
}

/**
 * DiskOutput is the part of an output kept on disk: one file per segment
 * of at most limit bytes, the last two kept, so that the last limit bytes
 * can always be read. Writes are buffered and never synced: a read
 * flushes the buffer first, and an attempt's end closes its file.
 */
class DiskOutput {
  segs: Segment[] = []; // oldest first; at most two
  /** The file of the last segment while the attempt runs; undefined otherwise. */
  private fd: number | undefined;
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(
    private readonly dir: string,
    readonly key: OutputKey,
    private readonly counter: Counter,
  ) {}

  path(start: number): string {
    return join(this.dir, outputName(this.key, start));
  }

  /** write appends p (at most limit bytes), whose first byte is at offset at. A write that fails drops what is kept. */
  write(p: Uint8Array, at: number, limit: number): void {
    const last = this.segs[this.segs.length - 1];
    if (this.fd === undefined || last.start + last.size !== at || last.size + p.length > limit) {
      this.rotate(at);
      if (this.fd === undefined) return;
    }
    this.pending.push(Buffer.from(p));
    this.pendingBytes += p.length;
    const seg = this.segs[this.segs.length - 1];
    this.counter.used += diskBytes(seg.size + p.length) - diskBytes(seg.size);
    seg.size += p.length;
    if (this.pendingBytes >= outputBufferBytes) this.flush();
  }

  /** rotate closes the segment written and starts one at offset at: the last one stays if it ends there, the older ones are removed. */
  rotate(at: number): void {
    if (!this.closeFile()) this.drop();
    const n = this.segs.length;
    // An empty last segment would share the new one's name.
    const keep = n > 0 && this.segs[n - 1].size > 0 && this.segs[n - 1].start + this.segs[n - 1].size === at ? 1 : 0;
    while (this.segs.length > keep) this.removeSegment(this.segs.shift()!);
    try {
      this.fd = openSync(this.path(at), "w", 0o600);
    } catch {
      return;
    }
    this.segs.push({ start: at, size: 0 });
    this.counter.used += diskBytes(0);
  }

  /** flush writes the buffered bytes to the file. */
  flush(): void {
    if (this.fd === undefined || this.pendingBytes === 0) return;
    const data = Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    try {
      for (let off = 0; off < data.length; ) off += writeSync(this.fd, data, off);
    } catch {
      this.drop();
    }
  }

  /** closeFile flushes and closes the segment written, if any; it returns false if that failed. */
  closeFile(): boolean {
    if (this.fd === undefined) return true;
    let ok = true;
    this.flush();
    if (this.fd === undefined) return false; // the flush failed and dropped everything
    try {
      closeSync(this.fd);
    } catch {
      ok = false;
    }
    this.fd = undefined;
    return ok;
  }

  /** drop removes every segment: what could not be written (a full disk) is not kept, and offsets go on counting. */
  drop(): void {
    if (this.fd !== undefined) {
      try {
        closeSync(this.fd);
      } catch {
        // gone anyway
      }
      this.fd = undefined;
    }
    this.pending = [];
    this.pendingBytes = 0;
    for (const s of this.segs) this.removeSegment(s);
    this.segs = [];
  }

  private removeSegment(s: Segment): void {
    rmSync(this.path(s.start), { force: true });
    this.counter.used -= diskBytes(s.size);
  }

  /** read returns up to n bytes from offset from on, as Output.read does, of an output whose end is end and whose last limit bytes are kept. */
  read(from: number, n: number, end: number, limit: number): { data: Uint8Array; offset: number } {
    this.flush();
    let first = end;
    if (this.segs.length > 0) first = Math.max(this.segs[0].start, end - limit);
    if (from < first || from > end) from = first;
    n = Math.min(n, end - from);
    const parts: Buffer[] = [];
    let got = 0;
    for (const s of this.segs) {
      if (got === n) break;
      const at = from + got;
      if (at < s.start || at >= s.start + s.size) continue;
      const buf = Buffer.alloc(Math.min(n - got, s.start + s.size - at));
      let k = 0;
      try {
        const fd = openSync(this.path(s.start), "r");
        try {
          while (k < buf.length) {
            const r = readSync(fd, buf, k, buf.length - k, at - s.start + k);
            if (r === 0) break;
            k += r;
          }
        } finally {
          closeSync(fd);
        }
      } catch {
        break;
      }
      parts.push(buf.subarray(0, k));
      got += k;
      if (k < buf.length) break; // the file is shorter than known: what follows is lost
    }
    return { data: new Uint8Array(Buffer.concat(parts)), offset: from };
  }

  /** end returns the offset after the last byte of a loaded output. */
  end(): number {
    const last = this.segs[this.segs.length - 1];
    return last.start + last.size;
  }
}

/**
 * Output is the tail of one attempt's output. Its bytes sit in a ring:
 * the byte at offset x is at buf[x % limit] while kept, and buf grows up
 * to limit bytes as they come.
 */
export class Output {
  private buf = new Uint8Array(0);
  /** Bytes written in all: the offset after the last one. */
  end = 0;
  /** The runs of the attempt writing here; writes made while none runs are dropped. */
  runs = 0;
  /** When (Date.now()) the last run ended; 0 while one runs. */
  endedAt = 0;
  /** The number of the entry in Outputs.ended that stands for it. */
  ended = 0;
  disk: DiskOutput | undefined;

  constructor(readonly limit: number) {}

  /** write appends p to the output, dropping the oldest bytes beyond the limit; it never fails, and drops p if the attempt does not run. */
  write(p: Uint8Array): void {
    if (this.runs === 0) return;
    const n = p.length;
    if (this.limit === 0) {
      this.end += n;
      return;
    }
    if (n > this.limit) {
      this.end += n - this.limit;
      p = p.subarray(n - this.limit);
    }
    if (this.disk) {
      this.disk.write(p, this.end, this.limit);
      this.end += p.length;
      return;
    }
    if (this.buf.length < this.limit && this.end + p.length > this.buf.length) {
      // Until the ring wraps, no byte is dropped and buf grows by doubling;
      // it takes its full size once the ring is about to wrap.
      const want = this.end + p.length;
      const grown = new Uint8Array(want > this.limit ? this.limit : Math.min(this.limit, Math.max(2 * this.buf.length, want, 256)));
      grown.set(this.buf.subarray(0, this.end));
      this.buf = grown;
    }
    while (p.length > 0) {
      const at = this.end % this.limit;
      const c = Math.min(this.buf.length - at, p.length);
      this.buf.set(p.subarray(0, c), at);
      p = p.subarray(c);
      this.end += c;
    }
  }

  /**
   * read returns up to n kept bytes from offset from on, the offset they
   * start at, and the end of the output. An offset before the first byte
   * kept, or past the end, reads from the first byte kept.
   */
  read(from: number, n: number): { data: Uint8Array; offset: number; end: number } {
    if (this.disk) {
      const { data, offset } = this.disk.read(from, n, this.end, this.limit);
      return { data, offset, end: this.end };
    }
    const first = this.end - Math.min(this.end, this.limit);
    if (from < first || from > this.end) from = first;
    n = Math.min(n, this.end - from);
    const data = new Uint8Array(n);
    let got = 0;
    while (got < n) {
      const at = (from + got) % this.limit;
      const c = Math.min(n - got, this.limit - at);
      data.set(this.buf.subarray(at, at + c), got);
      got += c;
    }
    return { data, offset: from, end: this.end };
  }
}

/** OutputsOptions bound the outputs kept; see WorkerOptions. */
export interface OutputsOptions {
  outputBytes?: number;
  outputRetentionMs?: number;
  outputAttempts?: number;
  outputDir?: string;
  outputMaxBytes?: number;
  /** The clock, Date.now by default; tests set their own. */
  now?: () => number;
}

interface EndedOutput {
  key: OutputKey;
  o: Output;
  seq: number;
}

/** Outputs are the outputs of the attempts that run or ran on a TaskExecutor. */
export class Outputs {
  private readonly limit: number;
  private readonly retention: number;
  private readonly keep: number;
  private readonly now: () => number;
  private readonly dir: string;
  private readonly maxBytes: number;
  private readonly counter: Counter = { used: 0 };
  private readonly m = new Map<string, Output>();
  /** The outputs that ended, oldest end first; an entry whose seq is not its output's any more (it ran again) is skipped. */
  private ended: EndedOutput[] = [];
  private seq = 0;
  /** The outputs in m that do not run. */
  private count = 0;

  /**
   * Creates the outputs: in memory, or on disk under opts.outputDir
   * (created if need be) with the outputs found there, as attempts that
   * ended when their files were last written. It throws if the directory
   * cannot be created or read.
   */
  constructor(opts: OutputsOptions = {}) {
    this.dir = opts.outputDir ?? "";
    this.limit = Math.max(opts.outputBytes || DEFAULT_OUTPUT_BYTES, 0);
    this.retention = opts.outputRetentionMs || (this.dir ? DEFAULT_OUTPUT_DISK_RETENTION_MS : DEFAULT_OUTPUT_RETENTION_MS);
    this.keep = opts.outputAttempts || (this.dir ? Number.MAX_SAFE_INTEGER : DEFAULT_OUTPUT_ATTEMPTS); // on disk, maxBytes bounds them
    this.maxBytes = opts.outputMaxBytes || DEFAULT_OUTPUT_MAX_BYTES;
    this.now = opts.now ?? Date.now;
    if (this.dir === "") return;
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const loaded: EndedOutput[] = [];
    for (const [k, { disk, time }] of this.load()) {
      const o = new Output(this.limit);
      o.disk = disk;
      o.end = disk.end();
      o.endedAt = time;
      this.m.set(k, o);
      loaded.push({ key: disk.key, o, seq: 0 });
    }
    loaded.sort((a, b) => a.o.endedAt - b.o.endedAt);
    for (const e of loaded) {
      e.seq = e.o.ended = ++this.seq;
      this.ended.push(e);
      this.count++;
    }
    this.expire();
  }

  /** The bytes the outputs take on disk. */
  get diskUsed(): number {
    return this.counter.used;
  }

  /**
   * load returns the outputs found in the directory, each with the time
   * its last segment was written, and removes the files of segments that
   * cannot be read (all but each output's last two, and those that do
   * not follow on).
   */
  private load(): Map<string, { disk: DiskOutput; time: number }> {
    const found = new Map<string, { disk: DiskOutput; time: number }>();
    for (const e of readdirSync(this.dir, { withFileTypes: true })) {
      const parsed = parseOutputName(e.name);
      if (!parsed || !e.isFile()) continue;
      let st;
      try {
        st = statSync(join(this.dir, e.name));
      } catch {
        continue;
      }
      const k = keyString(parsed.key);
      let f = found.get(k);
      if (!f) {
        f = { disk: new DiskOutput(this.dir, parsed.key, this.counter), time: 0 };
        found.set(k, f);
      }
      f.disk.segs.push({ start: parsed.start, size: st.size });
      this.counter.used += diskBytes(st.size);
      f.time = Math.max(f.time, st.mtimeMs);
    }
    for (const { disk } of found.values()) {
      const segs = disk.segs.sort((a, b) => a.start - b.start);
      let keep = segs.length - 1;
      if (keep > 0 && segs[keep - 1].start + segs[keep - 1].size === segs[keep].start) keep--;
      disk.segs = segs.slice(keep);
      for (const s of segs.slice(0, keep)) {
        rmSync(disk.path(s.start), { force: true });
        this.counter.used -= diskBytes(s.size);
      }
    }
    return found;
  }

  /** start returns the output a run of the attempt writes to: the attempt's, continued if it ran here before and is still kept. */
  start(key: OutputKey): Output {
    this.expire();
    const k = keyString(key);
    let o = this.m.get(k);
    if (!o) {
      o = new Output(this.limit);
      if (this.dir !== "" && this.limit > 0 && outputName(key, 2 ** 62) !== "") o.disk = new DiskOutput(this.dir, key, this.counter);
      this.m.set(k, o);
    } else if (o.endedAt !== 0) {
      o.endedAt = 0;
      this.count--;
    }
    o.runs++;
    // A file from the start, so that an attempt that writes nothing is found after a restart too.
    if (o.disk && o.disk.segs.length === 0) o.disk.rotate(o.end);
    return o;
  }

  /** finish records that a run of the attempt ended: once none runs, the output is kept for the retention. */
  finish(key: OutputKey, o: Output): void {
    o.runs--;
    const running = o.runs > 0;
    if (!running && o.disk && !o.disk.closeFile()) o.disk.drop();
    if (!running && this.m.get(keyString(key)) === o) {
      o.endedAt = Math.max(this.now(), 1);
      o.ended = ++this.seq;
      this.ended.push({ key, o, seq: this.seq });
      this.count++;
    }
    this.expire();
  }

  /** get returns the attempt's output if kept, and whether the attempt has ended. */
  get(key: OutputKey): { o: Output; ended: boolean } | undefined {
    this.expire();
    const o = this.m.get(keyString(key));
    return o && { o, ended: o.endedAt !== 0 };
  }

  /** expire forgets the ended outputs past the retention, and the oldest beyond the number (or, on disk, the bytes) kept. */
  private expire(): void {
    const now = this.now();
    while (this.ended.length > 0) {
      const e = this.ended[0];
      const k = keyString(e.key);
      const current = e.o.ended === e.seq && e.o.endedAt !== 0 && this.m.get(k) === e.o;
      if (current && this.count <= this.keep && (this.dir === "" || this.counter.used <= this.maxBytes) && now - e.o.endedAt < this.retention) return;
      this.ended.shift();
      if (current) {
        this.m.delete(k);
        this.count--;
        e.o.disk?.drop();
      }
    }
  }
}

/**
 * logLine formats a task's log line as the Go TaskExecutor's task logger
 * (log/slog's text handler) does: time, level INFO, msg, then the
 * attributes, each value quoted when it needs to be.
 */
export function logLine(msg: string, attrs: Record<string, unknown> = {}, at = new Date()): string {
  const parts = [`time=${at.toISOString()}`, "level=INFO", `msg=${quote(msg)}`];
  for (const [k, v] of Object.entries(attrs)) parts.push(`${quote(k)}=${quote(typeof v === "string" ? v : v instanceof Error ? v.message : String(v))}`);
  return parts.join(" ") + "\n";
}

function quote(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s === "" || /[\s="\\\u0000-\u001f\u007f]/.test(s) || !isWellFormed(s) ? JSON.stringify(s) : s;
}

function isWellFormed(s: string): boolean {
  return !/[\ud800-\udfff]/.test(s.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ""));
}
