// RESOURCE_EXHAUSTED (REQUEST_TOO_LARGE) with its ErrorInfo (error.proto:
// "a body over the server's limit ... MUST be answered RESOURCE_EXHAUSTED
// (REQUEST_TOO_LARGE)"), for a request whose Content-Length says so, before
// its body is read. connect-node's own `readMaxBytes` refusal (which still
// catches chunked and compressed bodies) carries no ErrorInfo, so the
// common case is answered here, in the request's protocol.
import type http from "node:http";
import type http2 from "node:http2";
import { constants as http2constants } from "node:http2";
import { Code, type ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, endStreamFlag, endStreamToJson, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { jpError } from "./errors.js";

type Req = http.IncomingMessage | http2.Http2ServerRequest;
type Res = http.ServerResponse | http2.Http2ServerResponse;

/** Answers and returns true when the request declares a body over `limit`. */
export function refuseTooLarge(req: Req, res: Res, limit: number): boolean {
  const len = Number(req.headers["content-length"] ?? "NaN");
  if (!Number.isFinite(len) || len <= limit) return false;
  answerError(req, res, tooLarge(limit, `request of ${len} bytes is over the limit of ${limit}`));
  return true;
}

export function tooLarge(limit: number, message: string): ConnectError {
  return jpError(Code.ResourceExhausted, "REQUEST_TOO_LARGE", message, { limit_bytes: String(limit) });
}

/** Answers `err` in the request's protocol, before (or instead of) the framework. */
export function answerError(req: Req, res: Res, err: ConnectError): void {
  const ct = String(req.headers["content-type"] ?? "");
  const r = res as http.ServerResponse;
  if (ct.startsWith("application/grpc")) {
    // gRPC and gRPC-Web: a trailers-only answer, the status in the headers.
    const h = setTrailerStatus(new Headers(), err);
    const out: Record<string, string> = { "content-type": ct.startsWith("application/grpc-web") ? "application/grpc-web+proto" : "application/grpc" };
    h.forEach((v, k) => (out[k] = v));
    r.writeHead(200, out);
    r.end();
  } else if (ct.startsWith("application/connect+")) {
    // Connect streaming: HTTP 200 and the error in the end-stream message.
    const end = Buffer.from(JSON.stringify(endStreamToJson(new Headers(), err, {})));
    const frame = Buffer.alloc(5 + end.length);
    frame[0] = endStreamFlag;
    frame.writeUInt32BE(end.length, 1);
    end.copy(frame, 5);
    r.writeHead(200, { "content-type": ct.startsWith("application/connect+json") ? "application/connect+json" : "application/connect+proto" });
    r.end(frame);
  } else {
    // Connect unary.
    r.writeHead(codeToHttpStatus(err.code), { "content-type": "application/json" });
    r.end(Buffer.from(errorToJsonBytes(err, {})));
  }
  // Do not read the body. Over HTTP/2, end the stream once the answer is
  // out (RST_STREAM NO_ERROR tells the client to stop sending); over
  // HTTP/1.1, drop the rest of the body.
  if ("stream" in res && res.stream) {
    const stream = res.stream;
    res.once("finish", () => stream.close(http2constants.NGHTTP2_NO_ERROR));
  } else {
    req.resume();
  }
}
