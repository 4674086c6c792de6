import type { Status } from "./gen/google/rpc/status_pb.js";
import { IdemError, statusError } from "./errors.js";

/**
 * BatchResult is one item's answer in a batch call, at the item's index:
 * `ok` with what the unary call of the same name returns, or not `ok` with
 * the error it throws (the same class, code and reason: a
 * {@link LeaseLostError} for a LEASE_LOST, an {@link InProgressError} for a
 * Claim answered IN_PROGRESS, …). One item's error never fails another.
 * For {@link IdemClient.doBatch}, E is unknown: a job's error may be its
 * handler's own.
 */
export type BatchResult<T, E = IdemError> = { ok: true; value: T } | { ok: false; error: E };

/** ItemResult is the oneof of a generated Batch*Result message. */
interface ItemResult<R> {
  result: { case: "response"; value: R } | { case: "error"; value: Status } | { case: undefined; value?: undefined };
}

/**
 * answers turns the results of a batch response into BatchResults, in the
 * order of the requests: each response through convert (the unary call's
 * own conversion, whose IdemError becomes the item's error, as an
 * IN_PROGRESS Claim's InProgressError), each google.rpc.Status through
 * {@link statusError}.
 */
export function answers<R, T>(rpc: string, sent: number, results: readonly ItemResult<R>[], convert: (r: R) => T): BatchResult<T>[] {
  if (results.length !== sent) {
    throw new IdemError(`idem: ${rpc} answered ${results.length} results for ${sent} requests; the server and this version of @idemhq/idem disagree on the API`);
  }
  return results.map((item, i): BatchResult<T> => {
    switch (item.result.case) {
      case "response":
        try {
          return { ok: true, value: convert(item.result.value) };
        } catch (err) {
          if (err instanceof IdemError) {
            return { ok: false, error: err };
          }
          throw err;
        }
      case "error":
        return { ok: false, error: statusError(item.result.value) };
    }
    return { ok: false, error: new IdemError(`idem: ${rpc} answered item ${i} with neither a response nor an error; this version of @idemhq/idem is older than the server`) };
  });
}
