// Request bodies read and checked before connect-node decodes them
// (error.proto: every error carries an ErrorInfo; "A request the server
// cannot decode MUST be answered INVALID_ARGUMENT with a BadRequest whose
// one violation has an empty `field`"; a body over the limit is
// RESOURCE_EXHAUSTED, REQUEST_TOO_LARGE). connect-node answers these
// itself, without the ErrorInfo (QUESTIONS.md 16, 19), so every POST body
// of a unary or server-streaming call, in Connect, gRPC or gRPC-Web, binary
// or JSON, compressed or not, chunked or not, is read here first (bounded),
// unframed, decompressed and decoded. What passes is handed to connect-node
// unchanged (a Connect unary JSON body already parsed). A DispatcherService
// JSON body is also checked key by key for unknown fields (src/jsonunknown.ts),
// after NOT_LEADER (QUESTIONS.md 18). What this module does not know (GET
// requests, gRPC-Web text, an encoding it lacks) goes to connect-node as is.
import type http from "node:http";
import type http2 from "node:http2";
import { fromBinary, fromJson, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { ConnectError, Code } from "@connectrpc/connect";
import type { Compression } from "@connectrpc/connect/protocol";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import { invalidArgument } from "./errors.js";
import { unknownJsonViolations } from "./jsonunknown.js";
import { answerError, tooLarge } from "./toolarge.js";

type Req = http.IncomingMessage | http2.Http2ServerRequest;
type Res = http.ServerResponse | http2.Http2ServerResponse;

interface Wire {
  codec: "json" | "proto";
  enveloped: boolean;
  /** The header naming the body's (or the envelopes') compression. */
  encodingHeader: string;
  /** Connect unary JSON: handed to connect-node parsed. */
  connectUnaryJson: boolean;
}

function wireOf(contentType: string): Wire | undefined {
  const ct = contentType.toLowerCase();
  let m = /^application\/(json|proto)(;|$)/.exec(ct);
  if (m) return { codec: m[1] as "json" | "proto", enveloped: false, encodingHeader: "content-encoding", connectUnaryJson: m[1] === "json" };
  m = /^application\/connect\+(json|proto)(;|$)/.exec(ct);
  if (m) return { codec: m[1] as "json" | "proto", enveloped: true, encodingHeader: "connect-content-encoding", connectUnaryJson: false };
  m = /^application\/grpc(-web)?(\+(json|proto))?(;|$)/.exec(ct);
  if (m) return { codec: (m[3] ?? "proto") as "json" | "proto", enveloped: true, encodingHeader: "grpc-encoding", connectUnaryJson: false };
  return undefined;
}

const COMPRESSIONS: Record<string, Compression | null> = { "": null, identity: null, gzip: compressionGzip, br: compressionBrotli };

function undecodable(what: string): ConnectError {
  return invalidArgument([{ field: "", description: `cannot decode the request: ${what}` }]);
}

export type Precheck =
  | { answered: true }
  | { answered: false; parsedJson?: JsonValue; bytes?: Uint8Array };

export interface PrecheckOptions {
  input: DescMessage;
  limit: number;
  /** DispatcherService: NOT_LEADER first, then unknown JSON keys named one by one. */
  dispatcher: boolean;
  notLeader: () => Promise<ConnectError | undefined>;
}

/** Reads and checks the request's body; answers it (and returns answered) when it must be refused. */
export async function precheck(req: Req, res: Res, o: PrecheckOptions): Promise<Precheck> {
  if (req.method !== "POST") return { answered: false };
  const wire = wireOf(String(req.headers["content-type"] ?? ""));
  if (!wire) return { answered: false };
  const encoding = String(req.headers[wire.encodingHeader] ?? "").toLowerCase();
  const compression = COMPRESSIONS[encoding];
  if (compression === undefined) return { answered: false };
  const refuse = (e: ConnectError): Precheck => {
    answerError(req, res, e);
    return { answered: true };
  };
  const overLimit = () => tooLarge(o.limit, `request is over the limit of ${o.limit} bytes`);

  // The body, bounded: framing aside, never more than the limit.
  const cap = o.limit + (wire.enveloped ? 5 : 0);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > cap) return refuse(overLimit());
    chunks.push(c);
  }
  const body = new Uint8Array(Buffer.concat(chunks));

  // Unframed: a unary or server-streaming request holds one message.
  let message = body;
  let compressed = compression !== null;
  if (wire.enveloped) {
    if (body.length < 5) return refuse(undecodable("an incomplete message frame"));
    const flags = body[0]!;
    const len = new DataView(body.buffer, body.byteOffset, body.byteLength).getUint32(1);
    if (len > o.limit) return refuse(overLimit());
    if (body.length !== 5 + len) {
      // Several frames, or a truncated one: connect-node's own framing rules apply.
      if (body.length < 5 + len) return refuse(undecodable("a truncated message frame"));
      return { answered: false, bytes: body };
    }
    message = body.subarray(5);
    compressed = (flags & 0x01) === 0x01;
    if (compressed && compression === null) return refuse(undecodable(`a compressed frame without ${wire.encodingHeader}`));
  }
  if (compressed && compression) {
    try {
      message = await compression.decompress(message, o.limit);
    } catch (e) {
      const ce = ConnectError.from(e);
      return refuse(ce.code === Code.ResourceExhausted ? overLimit() : undecodable(ce.rawMessage));
    }
  }

  if (wire.codec === "proto") {
    try {
      fromBinary(o.input, message);
    } catch (e) {
      return refuse(undecodable(e instanceof Error ? e.message : String(e)));
    }
    return { answered: false, bytes: body };
  }
  let parsed: JsonValue;
  try {
    parsed = JSON.parse(Buffer.from(message).toString("utf8")) as JsonValue;
  } catch (e) {
    return refuse(undecodable(String(e)));
  }
  if (o.dispatcher) {
    const nl = await o.notLeader();
    if (nl) return refuse(nl);
    const v = unknownJsonViolations(o.input, parsed);
    if (v.length > 0) return refuse(invalidArgument(v));
  }
  try {
    fromJson(o.input, parsed);
  } catch (e) {
    return refuse(undecodable(e instanceof Error ? e.message : String(e)));
  }
  return wire.connectUnaryJson ? { answered: false, parsedJson: parsed } : { answered: false, bytes: body };
}
