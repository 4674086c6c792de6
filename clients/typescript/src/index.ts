/**
 * @idemhq/idem is the TypeScript client of idem, the idempotency-key
 * coordination service: typed calls for every RPC of IdempotencyService and
 * AdminService, and {@link IdemClient.do}, which runs a job's side effect
 * at most once per key across all workers.
 *
 * This entry point runs in every runtime with fetch (Node 18+, Deno, Bun,
 * browsers, edge): its transport is {@link connectTransport}. gRPC over
 * Node's HTTP/2 is in "@idemhq/idem/node".
 *
 * @packageDocumentation
 */
export {
  AdminClient,
  type ClaimRequest,
  type ClaimResult,
  type ClientOptions,
  type CompleteRequest,
  type CompleteStepRequest,
  type HeldEvent,
  type HeldRequest,
  type ListHeldRequest,
  type LookupHistory,
  type ResolveRequest,
  type StartStepRequest,
  type FailRequest,
  type HeartbeatRequest,
  IdemClient,
  type ListRecordsPage,
  type ListRecordsRequest,
  type LookupRequest,
  MAX_WAIT_MS,
  type RecordRef,
  type ResolveRecordRequest,
  type StatsRequest,
  type StatsRow,
} from "./client.js";
export type { BatchResult } from "./batch.js";
export type { Attempt, DoOptions, DoResult, Handler, Job } from "./do.js";
export type { BatchHandler, DoBatchOptions } from "./dobatch.js";
export {
  AlreadyTerminalError,
  CompletionUnknownError,
  ERROR_DOMAIN,
  errorReason,
  FailureNotRecordedError,
  FingerprintMismatchError,
  IdemError,
  InProgressError,
  isPermanent,
  isTransient,
  JobFailedError,
  LeaseLostError,
  NotFoundError,
  NotUnresolvedError,
  permanent,
  PermanentError,
  ResolvedByOperatorError,
  RpcError,
  statusError,
  StepAlreadyFinishedError,
  UnresolvedError,
} from "./errors.js";
export { canonicalJSON, fingerprint, fingerprintJSON } from "./fingerprint.js";
export type { JobRecord, JobStep, TimelineEntry } from "./record.js";
export { stepKey, type StepFn, type StepResult, type Steps } from "./step.js";
export {
  cantTell,
  completed,
  type Decision,
  failed,
  type Held,
  type HeldStep,
  release,
  type ResolverFn,
  type ResolverOptions,
  runResolver,
} from "./resolver.js";
export type { RetryPolicy } from "./retry.js";
export { MAX_ERROR_BYTES, storableText } from "./text.js";
export { connectTransport, type ConnectTransportOptions } from "./transport.js";
export { ErrorReason } from "./gen/idem/v1/error_reason_pb.js";
export { Outcome, State, StepState, TimelineEntryKind } from "./gen/idem/v1/idem_pb.js";
/** pb is the generated code of idem's protos (messages, enums, services), for {@link IdemClient.raw}. */
export * as pb from "./pb.js";
