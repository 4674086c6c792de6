// idem is an idempotency-key coordination service. A worker that is about to
// perform an irreversible side effect (charge a card, send an email, call a
// webhook) for a job that an at-least-once queue may deliver more than once
// calls Claim first, performs the effect only when the outcome is ACQUIRED,
// and then calls Complete (success) or Fail (failure). Every other delivery
// of the same job gets IN_PROGRESS, or the stored result (COMPLETED) or error
// (FAILED), so the effect happens once.
//
// A record is identified by (tenant, namespace, key). The tenant comes from
// authentication and never from a request.
//
// Errors. Every error that a worker may want to branch on carries a
// google.rpc.ErrorInfo detail with domain "idem" and one of these reasons,
// the values of the enum ErrorReason (error_reason.proto) without their
// ERROR_REASON_ prefix:
//   - INVALID_ARGUMENT    / INVALID_NAMESPACE, INVALID_KEY, INVALID_FINGERPRINT,
//     INVALID_CLAIMANT, INVALID_LEASE_TTL, INVALID_RETENTION, INVALID_WAIT,
//     INVALID_RESULT, INVALID_ERROR, INVALID_TOKEN: a field is malformed or out of bounds;
//     the message names the field and the bound. Nothing was written. A
//     text field that breaks the text rule below also has the ErrorInfo
//     metadata "field" and "problem" (NUL_CHARACTER or INVALID_UTF8).
//   - FAILED_PRECONDITION / FINGERPRINT_MISMATCH: the key was used before for
//     a request with another fingerprint.
//   - FAILED_PRECONDITION / ALREADY_TERMINAL: the record is no longer
//     PROCESSING, EXPIRED or UNRESOLVED, and this call does not repeat the
//     call that ended it, the same kind with the same value.
//   - FAILED_PRECONDITION / RESOLVED_BY_OPERATOR: an operator resolved the
//     record (AdminService.ResolveRecord), and this call does not carry the
//     value the resolution stored: its result or error was not stored.
//   - FAILED_PRECONDITION / NOT_UNRESOLVED (AdminService.ResolveRecord,
//     ResolverService.Resolve): the record is not UNRESOLVED.
//     INVALID_ARGUMENT / INVALID_RESOLUTION: no resolution given;
//     INVALID_RESOLVER: a resolver's name that is empty, over 128 bytes or
//     has a control character; INVALID_REASON: a reason (of a resolution
//     or a deletion) over 1024 bytes. Nothing was written.
//   - ABORTED / LEASE_LOST: the token is not the record's current token; the
//     lease was taken over by another worker. Stop and do not retry.
//   - NOT_FOUND / NOT_FOUND: there is no such record (never claimed, purged
//     after its retention, or deleted with AdminService.DeleteRecord).
//   - UNAVAILABLE / STORE_UNAVAILABLE: the database cannot be reached. Retry
//     with backoff; nothing is known to have changed.
//   - UNAVAILABLE / CONTENTION: the record changed under the call every time
//     it was tried. Retry with backoff.
//   - UNAUTHENTICATED / UNAUTHENTICATED: no credentials, or a bearer token
//     or client certificate that names no tenant (only when idemd runs with a
//     config file). Nothing was read or written.
//   - INVALID_ARGUMENT    / INVALID_PAGE_SIZE, INVALID_PAGE_TOKEN,
//     INVALID_STATE, INVALID_OLDER_THAN (AdminService.ListRecords): the
//     page_size is outside 1–1000, the page_token is not one the server
//     returned, the state is not a known State, or older_than is outside
//     0s–87600h (10 years). Nothing was read.
//   - PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED: the namespace is not in the
//     caller's tenant's allow-list; this holds for AdminService too, whose
//     listings and counts without a namespace show only the namespaces the
//     allow-list admits. PERMISSION_DENIED / NOT_ADMIN: an AdminService call
//     from a tenant without admin rights. PERMISSION_DENIED / NOT_OPERATOR:
//     an AdminService call that names another tenant, or all_tenants, from
//     a tenant that is not an operator; metadata "field" names the field.
//   - INVALID_ARGUMENT    / INVALID_TENANT (AdminService): the tenant named
//     is not in idemd's config, or tenant and all_tenants are both set.
//   - RESOURCE_EXHAUSTED / RATE_LIMITED: the tenant is over its rate limit;
//     a google.rpc.RetryInfo says how long to wait. Nothing was written.
//     In a batch call it is counted per item: the items over the limit get
//     it, each in its own result.
//   - INVALID_ARGUMENT    / INVALID_BATCH_SIZE (the batch calls): the
//     request holds no items or more than the server allows.
//   - The step calls' own (StartStep, CompleteStep): INVALID_ARGUMENT /
//     INVALID_STEP_NAME; FAILED_PRECONDITION / STEP_ALREADY_FINISHED, the
//     step is FINISHED with another result, or a StartStep of a FINISHED
//     step; RESOURCE_EXHAUSTED / TOO_MANY_STEPS or STEPS_TOO_LARGE, the
//     job's steps would be more than the server allows. Nothing was
//     written.
//   - The HTTP/JSON API's own (docs/http-api.md): INVALID_ARGUMENT /
//     UNKNOWN_FIELD, a body field or query parameter the request does not
//     have; INVALID_ARGUMENT / MALFORMED_REQUEST, a body that is not one
//     JSON object of the request's type, or (HTTP 415) a Content-Type or
//     Content-Encoding it does not read; RESOURCE_EXHAUSTED /
//     REQUEST_TOO_LARGE (HTTP 413), a body over the largest valid request.
//     A JSON value that is not of its field's type gets that field's reason
//     (INVALID_LEASE_TTL, …) where it has one. Nothing was written.
//
// Text. Every string field (namespace, key, claimant, error) is UTF-8
// without the character U+0000 (NUL), whichever store the server runs on:
// a NUL anywhere in one is INVALID_ARGUMENT with that field's reason
// (INVALID_CLAIMANT, …) and the problem NUL_CHARACTER, also on a Claim that
// would only replay; nothing is read or written. A string that is not valid
// UTF-8 is refused by gRPC's protobuf decoding (INTERNAL, "error
// unmarshalling request") before idem sees it; a transport that hands it on,
// as the HTTP/JSON API does for a JSON string or a REST path segment, gets
// INVALID_ARGUMENT with the problem INVALID_UTF8. Other control
// characters (tab, newline, …) are kept as sent, except in keys, which allow
// none. The Go SDK's Do makes the error text it sends storable: NULs and
// bytes that are not UTF-8 become U+FFFD and it is cut to 4 KiB.

// @generated by protoc-gen-es v2.13.0 with parameter "target=ts,import_extension=js"
// @generated from file idem/v1/idem.proto (package idem.v1, syntax proto3)
/* eslint-disable */

import type { GenEnum, GenFile, GenMessage, GenService } from "@bufbuild/protobuf/codegenv2";
import { enumDesc, fileDesc, messageDesc, serviceDesc } from "@bufbuild/protobuf/codegenv2";
import { file_google_api_annotations } from "../../google/api/annotations_pb.js";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import { file_google_protobuf_duration, file_google_protobuf_timestamp } from "@bufbuild/protobuf/wkt";
import type { Status } from "../../google/rpc/status_pb.js";
import { file_google_rpc_status } from "../../google/rpc/status_pb.js";
import type { Message } from "@bufbuild/protobuf";

/**
 * Describes the file idem/v1/idem.proto.
 */
export const file_idem_v1_idem: GenFile = /*@__PURE__*/
  fileDesc("ChJpZGVtL3YxL2lkZW0ucHJvdG8SB2lkZW0udjEiigQKBlJlY29yZBIRCgluYW1lc3BhY2UYASABKAkSCwoDa2V5GAIgASgJEh0KBXN0YXRlGAMgASgOMg4uaWRlbS52MS5TdGF0ZRINCgV0b2tlbhgEIAEoAxIPCgdhdHRlbXB0GAUgASgFEhAKCGNsYWltYW50GAYgASgJEhMKC2ZpbmdlcnByaW50GAcgASgMEjQKEGxlYXNlX2V4cGlyZXNfYXQYCCABKAsyGi5nb29nbGUucHJvdG9idWYuVGltZXN0YW1wEg4KBnJlc3VsdBgJIAEoDBINCgVlcnJvchgKIAEoCRIuCgpjcmVhdGVkX2F0GAsgASgLMhouZ29vZ2xlLnByb3RvYnVmLlRpbWVzdGFtcBIuCgp1cGRhdGVkX2F0GAwgASgLMhouZ29vZ2xlLnByb3RvYnVmLlRpbWVzdGFtcBIwCgxjb21wbGV0ZWRfYXQYDSABKAsyGi5nb29nbGUucHJvdG9idWYuVGltZXN0YW1wEi4KCmV4cGlyZXNfYXQYDiABKAsyGi5nb29nbGUucHJvdG9idWYuVGltZXN0YW1wEg4KBnBvbGljeRgPIAEoCRIOCgZ0ZW5hbnQYECABKAkSDAoEaG9sZBgRIAEoCBIcCgVzdGVwcxgeIAMoCzINLmlkZW0udjEuU3RlcBIXCg9ob2xkX3VuZmluaXNoZWQYHyABKAgitwEKBFN0ZXASDAoEbmFtZRgBIAEoCRIhCgVzdGF0ZRgCIAEoDjISLmlkZW0udjEuU3RlcFN0YXRlEg4KBnJlc3VsdBgDIAEoDBINCgV0b2tlbhgEIAEoAxIuCgpzdGFydGVkX2F0GAUgASgLMhouZ29vZ2xlLnByb3RvYnVmLlRpbWVzdGFtcBIvCgtmaW5pc2hlZF9hdBgGIAEoCzIaLmdvb2dsZS5wcm90b2J1Zi5UaW1lc3RhbXAi2gEKDENsYWltUmVxdWVzdBIRCgluYW1lc3BhY2UYASABKAkSCwoDa2V5GAIgASgJEhMKC2ZpbmdlcnByaW50GAMgASgMEiwKCWxlYXNlX3R0bBgEIAEoCzIZLmdvb2dsZS5wcm90b2J1Zi5EdXJhdGlvbhIQCghjbGFpbWFudBgFIAEoCRIsCglyZXRlbnRpb24YBiABKAsyGS5nb29nbGUucHJvdG9idWYuRHVyYXRpb24SJwoEd2FpdBgHIAEoCzIZLmdvb2dsZS5wcm90b2J1Zi5EdXJhdGlvbiKDAQoNQ2xhaW1SZXNwb25zZRIhCgdvdXRjb21lGAEgASgOMhAuaWRlbS52MS5PdXRjb21lEh8KBnJlY29yZBgCIAEoCzIPLmlkZW0udjEuUmVjb3JkEi4KC3JldHJ5X2FmdGVyGAMgASgLMhkuZ29vZ2xlLnByb3RvYnVmLkR1cmF0aW9uIlAKD0NvbXBsZXRlUmVxdWVzdBIRCgluYW1lc3BhY2UYASABKAkSCwoDa2V5GAIgASgJEg0KBXRva2VuGAMgASgDEg4KBnJlc3VsdBgEIAEoDCIzChBDb21wbGV0ZVJlc3BvbnNlEh8KBnJlY29yZBgBIAEoCzIPLmlkZW0udjEuUmVjb3JkIl4KC0ZhaWxSZXF1ZXN0EhEKCW5hbWVzcGFjZRgBIAEoCRILCgNrZXkYAiABKAkSDQoFdG9rZW4YAyABKAMSDQoFZXJyb3IYBCABKAkSEQoJcmV0cnlhYmxlGAUgASgIIi8KDEZhaWxSZXNwb25zZRIfCgZyZWNvcmQYASABKAsyDy5pZGVtLnYxLlJlY29yZCJvChBIZWFydGJlYXRSZXF1ZXN0EhEKCW5hbWVzcGFjZRgBIAEoCRILCgNrZXkYAiABKAkSDQoFdG9rZW4YAyABKAMSLAoJbGVhc2VfdHRsGAQgASgLMhkuZ29vZ2xlLnByb3RvYnVmLkR1cmF0aW9uIjQKEUhlYXJ0YmVhdFJlc3BvbnNlEh8KBnJlY29yZBgBIAEoCzIPLmlkZW0udjEuUmVjb3JkIkgKDUxvb2t1cFJlcXVlc3QSEQoJbmFtZXNwYWNlGAEgASgJEgsKA2tleRgCIAEoCRIXCg9pbmNsdWRlX2hpc3RvcnkYAyABKAgiWgoOTG9va3VwUmVzcG9uc2USHwoGcmVjb3JkGAEgASgLMg8uaWRlbS52MS5SZWNvcmQSJwoHaGlzdG9yeRgCIAMoCzIWLmlkZW0udjEuVGltZWxpbmVFbnRyeSI8ChFCYXRjaENsYWltUmVxdWVzdBInCghyZXF1ZXN0cxgBIAMoCzIVLmlkZW0udjEuQ2xhaW1SZXF1ZXN0IkAKEkJhdGNoQ2xhaW1SZXNwb25zZRIqCgdyZXN1bHRzGAEgAygLMhkuaWRlbS52MS5CYXRjaENsYWltUmVzdWx0Im0KEEJhdGNoQ2xhaW1SZXN1bHQSKgoIcmVzcG9uc2UYASABKAsyFi5pZGVtLnYxLkNsYWltUmVzcG9uc2VIABIjCgVlcnJvchgCIAEoCzISLmdvb2dsZS5ycGMuU3RhdHVzSABCCAoGcmVzdWx0IkIKFEJhdGNoQ29tcGxldGVSZXF1ZXN0EioKCHJlcXVlc3RzGAEgAygLMhguaWRlbS52MS5Db21wbGV0ZVJlcXVlc3QiRgoVQmF0Y2hDb21wbGV0ZVJlc3BvbnNlEi0KB3Jlc3VsdHMYASADKAsyHC5pZGVtLnYxLkJhdGNoQ29tcGxldGVSZXN1bHQicwoTQmF0Y2hDb21wbGV0ZVJlc3VsdBItCghyZXNwb25zZRgBIAEoCzIZLmlkZW0udjEuQ29tcGxldGVSZXNwb25zZUgAEiMKBWVycm9yGAIgASgLMhIuZ29vZ2xlLnJwYy5TdGF0dXNIAEIICgZyZXN1bHQiOgoQQmF0Y2hGYWlsUmVxdWVzdBImCghyZXF1ZXN0cxgBIAMoCzIULmlkZW0udjEuRmFpbFJlcXVlc3QiPgoRQmF0Y2hGYWlsUmVzcG9uc2USKQoHcmVzdWx0cxgBIAMoCzIYLmlkZW0udjEuQmF0Y2hGYWlsUmVzdWx0ImsKD0JhdGNoRmFpbFJlc3VsdBIpCghyZXNwb25zZRgBIAEoCzIVLmlkZW0udjEuRmFpbFJlc3BvbnNlSAASIwoFZXJyb3IYAiABKAsyEi5nb29nbGUucnBjLlN0YXR1c0gAQggKBnJlc3VsdCJEChVCYXRjaEhlYXJ0YmVhdFJlcXVlc3QSKwoIcmVxdWVzdHMYASADKAsyGS5pZGVtLnYxLkhlYXJ0YmVhdFJlcXVlc3QiSAoWQmF0Y2hIZWFydGJlYXRSZXNwb25zZRIuCgdyZXN1bHRzGAEgAygLMh0uaWRlbS52MS5CYXRjaEhlYXJ0YmVhdFJlc3VsdCJ1ChRCYXRjaEhlYXJ0YmVhdFJlc3VsdBIuCghyZXNwb25zZRgBIAEoCzIaLmlkZW0udjEuSGVhcnRiZWF0UmVzcG9uc2VIABIjCgVlcnJvchgCIAEoCzISLmdvb2dsZS5ycGMuU3RhdHVzSABCCAoGcmVzdWx0Ij4KEkJhdGNoTG9va3VwUmVxdWVzdBIoCghyZXF1ZXN0cxgBIAMoCzIWLmlkZW0udjEuTG9va3VwUmVxdWVzdCJCChNCYXRjaExvb2t1cFJlc3BvbnNlEisKB3Jlc3VsdHMYASADKAsyGi5pZGVtLnYxLkJhdGNoTG9va3VwUmVzdWx0Im8KEUJhdGNoTG9va3VwUmVzdWx0EisKCHJlc3BvbnNlGAEgASgLMhcuaWRlbS52MS5Mb29rdXBSZXNwb25zZUgAEiMKBWVycm9yGAIgASgLMhIuZ29vZ2xlLnJwYy5TdGF0dXNIAEIICgZyZXN1bHQiTwoQU3RhcnRTdGVwUmVxdWVzdBIRCgluYW1lc3BhY2UYASABKAkSCwoDa2V5GAIgASgJEg0KBXRva2VuGAMgASgDEgwKBHN0ZXAYBCABKAkiMAoRU3RhcnRTdGVwUmVzcG9uc2USGwoEc3RlcBgBIAEoCzINLmlkZW0udjEuU3RlcCJiChNDb21wbGV0ZVN0ZXBSZXF1ZXN0EhEKCW5hbWVzcGFjZRgBIAEoCRILCgNrZXkYAiABKAkSDQoFdG9rZW4YAyABKAMSDAoEc3RlcBgEIAEoCRIOCgZyZXN1bHQYBSABKAwiMwoUQ29tcGxldGVTdGVwUmVzcG9uc2USGwoEc3RlcBgBIAEoCzINLmlkZW0udjEuU3RlcCLPAgoNVGltZWxpbmVFbnRyeRIoCgRraW5kGAEgASgOMhouaWRlbS52MS5UaW1lbGluZUVudHJ5S2luZBImCgJhdBgCIAEoCzIaLmdvb2dsZS5wcm90b2J1Zi5UaW1lc3RhbXASDQoFdG9rZW4YAyABKAMSHQoFc3RhdGUYBCABKA4yDi5pZGVtLnYxLlN0YXRlEhYKDnByZXZpb3VzX3Rva2VuGAUgASgDEiYKDnByZXZpb3VzX3N0YXRlGAYgASgOMg4uaWRlbS52MS5TdGF0ZRIQCghjbGFpbWFudBgHIAEoCRIZChFwcmV2aW91c19jbGFpbWFudBgIIAEoCRINCgVlcnJvchgJIAEoCRIdCgVhY3RvchgKIAEoCzIOLmlkZW0udjEuQWN0b3ISDgoGcmVhc29uGAsgASgJEhMKC2ZpbmdlcnByaW50GAwgASgMIjsKBUFjdG9yEg4KBnRlbmFudBgBIAEoCRIQCghvcGVyYXRvchgCIAEoCRIQCghyZXNvbHZlchgDIAEoCSqYAQoFU3RhdGUSFQoRU1RBVEVfVU5TUEVDSUZJRUQQABIUChBTVEFURV9QUk9DRVNTSU5HEAESEwoPU1RBVEVfQ09NUExFVEVEEAISEAoMU1RBVEVfRkFJTEVEEAMSEgoOU1RBVEVfUkVMRUFTRUQQBBIRCg1TVEFURV9FWFBJUkVEEAUSFAoQU1RBVEVfVU5SRVNPTFZFRBAGKpQBCgdPdXRjb21lEhcKE09VVENPTUVfVU5TUEVDSUZJRUQQABIUChBPVVRDT01FX0FDUVVJUkVEEAESFwoTT1VUQ09NRV9JTl9QUk9HUkVTUxACEhUKEU9VVENPTUVfQ09NUExFVEVEEAMSEgoOT1VUQ09NRV9GQUlMRUQQBBIWChJPVVRDT01FX1VOUkVTT0xWRUQQBSpYCglTdGVwU3RhdGUSGgoWU1RFUF9TVEFURV9VTlNQRUNJRklFRBAAEhYKElNURVBfU1RBVEVfU1RBUlRFRBABEhcKE1NURVBfU1RBVEVfRklOSVNIRUQQAiqtAgoRVGltZWxpbmVFbnRyeUtpbmQSIwofVElNRUxJTkVfRU5UUllfS0lORF9VTlNQRUNJRklFRBAAEiIKHlRJTUVMSU5FX0VOVFJZX0tJTkRfVEFLRU5fT1ZFUhABEh4KGlRJTUVMSU5FX0VOVFJZX0tJTkRfRkFJTEVEEAISIAocVElNRUxJTkVfRU5UUllfS0lORF9SRUxFQVNFRBADEhwKGFRJTUVMSU5FX0VOVFJZX0tJTkRfSEVMRBAEEiAKHFRJTUVMSU5FX0VOVFJZX0tJTkRfUkVTT0xWRUQQBRIfChtUSU1FTElORV9FTlRSWV9LSU5EX0RFTEVURUQQBhIsCihUSU1FTElORV9FTlRSWV9LSU5EX0ZJTkdFUlBSSU5UX01JU01BVENIEAcyugsKEklkZW1wb3RlbmN5U2VydmljZRJxCgVDbGFpbRIVLmlkZW0udjEuQ2xhaW1SZXF1ZXN0GhYuaWRlbS52MS5DbGFpbVJlc3BvbnNlIjmC0+STAjM6ASoiLi92MS9uYW1lc3BhY2VzL3tuYW1lc3BhY2V9L3JlY29yZHMve2tleX06Y2xhaW0SfQoIQ29tcGxldGUSGC5pZGVtLnYxLkNvbXBsZXRlUmVxdWVzdBoZLmlkZW0udjEuQ29tcGxldGVSZXNwb25zZSI8gtPkkwI2OgEqIjEvdjEvbmFtZXNwYWNlcy97bmFtZXNwYWNlfS9yZWNvcmRzL3trZXl9OmNvbXBsZXRlEm0KBEZhaWwSFC5pZGVtLnYxLkZhaWxSZXF1ZXN0GhUuaWRlbS52MS5GYWlsUmVzcG9uc2UiOILT5JMCMjoBKiItL3YxL25hbWVzcGFjZXMve25hbWVzcGFjZX0vcmVjb3Jkcy97a2V5fTpmYWlsEoEBCglIZWFydGJlYXQSGS5pZGVtLnYxLkhlYXJ0YmVhdFJlcXVlc3QaGi5pZGVtLnYxLkhlYXJ0YmVhdFJlc3BvbnNlIj2C0+STAjc6ASoiMi92MS9uYW1lc3BhY2VzL3tuYW1lc3BhY2V9L3JlY29yZHMve2tleX06aGVhcnRiZWF0EmsKBkxvb2t1cBIWLmlkZW0udjEuTG9va3VwUmVxdWVzdBoXLmlkZW0udjEuTG9va3VwUmVzcG9uc2UiMILT5JMCKhIoL3YxL25hbWVzcGFjZXMve25hbWVzcGFjZX0vcmVjb3Jkcy97a2V5fRJoCgpCYXRjaENsYWltEhouaWRlbS52MS5CYXRjaENsYWltUmVxdWVzdBobLmlkZW0udjEuQmF0Y2hDbGFpbVJlc3BvbnNlIiGC0+STAhs6ASoiFi92MS9yZWNvcmRzOmJhdGNoQ2xhaW0SdAoNQmF0Y2hDb21wbGV0ZRIdLmlkZW0udjEuQmF0Y2hDb21wbGV0ZVJlcXVlc3QaHi5pZGVtLnYxLkJhdGNoQ29tcGxldGVSZXNwb25zZSIkgtPkkwIeOgEqIhkvdjEvcmVjb3JkczpiYXRjaENvbXBsZXRlEmQKCUJhdGNoRmFpbBIZLmlkZW0udjEuQmF0Y2hGYWlsUmVxdWVzdBoaLmlkZW0udjEuQmF0Y2hGYWlsUmVzcG9uc2UiIILT5JMCGjoBKiIVL3YxL3JlY29yZHM6YmF0Y2hGYWlsEngKDkJhdGNoSGVhcnRiZWF0Eh4uaWRlbS52MS5CYXRjaEhlYXJ0YmVhdFJlcXVlc3QaHy5pZGVtLnYxLkJhdGNoSGVhcnRiZWF0UmVzcG9uc2UiJYLT5JMCHzoBKiIaL3YxL3JlY29yZHM6YmF0Y2hIZWFydGJlYXQSbAoLQmF0Y2hMb29rdXASGy5pZGVtLnYxLkJhdGNoTG9va3VwUmVxdWVzdBocLmlkZW0udjEuQmF0Y2hMb29rdXBSZXNwb25zZSIigtPkkwIcOgEqIhcvdjEvcmVjb3JkczpiYXRjaExvb2t1cBKKAQoJU3RhcnRTdGVwEhkuaWRlbS52MS5TdGFydFN0ZXBSZXF1ZXN0GhouaWRlbS52MS5TdGFydFN0ZXBSZXNwb25zZSJGgtPkkwJAOgEqIjsvdjEvbmFtZXNwYWNlcy97bmFtZXNwYWNlfS9yZWNvcmRzL3trZXl9L3N0ZXBzL3tzdGVwfTpzdGFydBKWAQoMQ29tcGxldGVTdGVwEhwuaWRlbS52MS5Db21wbGV0ZVN0ZXBSZXF1ZXN0Gh0uaWRlbS52MS5Db21wbGV0ZVN0ZXBSZXNwb25zZSJJgtPkkwJDOgEqIj4vdjEvbmFtZXNwYWNlcy97bmFtZXNwYWNlfS9yZWNvcmRzL3trZXl9L3N0ZXBzL3tzdGVwfTpjb21wbGV0ZWIGcHJvdG8z", [file_google_api_annotations, file_google_protobuf_duration, file_google_protobuf_timestamp, file_google_rpc_status]);

/**
 * Record is the server's state for one (namespace, key).
 *
 * @generated from message idem.v1.Record
 */
export type Record = Message<"idem.v1.Record"> & {
  /**
   * The job type or scope the key belongs to.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The idempotency key.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * Where the record is in its life.
   *
   * @generated from field: idem.v1.State state = 3;
   */
  state: State;

  /**
   * The fencing token of the latest ACQUIRED outcome. Every acquisition hands
   * out a token strictly greater than all earlier ones for this record, also
   * across a purge. Pass it to downstream systems that can reject stale
   * writers.
   *
   * @generated from field: int64 token = 4;
   */
  token: bigint;

  /**
   * How many times the record was acquired since it was created.
   *
   * @generated from field: int32 attempt = 5;
   */
  attempt: number;

  /**
   * The claimant id sent with the latest ACQUIRED Claim; empty if none.
   *
   * @generated from field: string claimant = 6;
   */
  claimant: string;

  /**
   * The fingerprint stored when the record was created; empty if none.
   *
   * @generated from field: bytes fingerprint = 7;
   */
  fingerprint: Uint8Array;

  /**
   * When the current lease runs out. Set while PROCESSING, and kept on an
   * EXPIRED record to show when it ran out.
   *
   * @generated from field: google.protobuf.Timestamp lease_expires_at = 8;
   */
  leaseExpiresAt?: Timestamp | undefined;

  /**
   * The result stored by Complete (COMPLETED only).
   *
   * @generated from field: bytes result = 9;
   */
  result: Uint8Array;

  /**
   * The error stored by Fail (FAILED and RELEASED only).
   *
   * @generated from field: string error = 10;
   */
  error: string;

  /**
   * When the record was created.
   *
   * @generated from field: google.protobuf.Timestamp created_at = 11;
   */
  createdAt?: Timestamp | undefined;

  /**
   * When the record last changed.
   *
   * @generated from field: google.protobuf.Timestamp updated_at = 12;
   */
  updatedAt?: Timestamp | undefined;

  /**
   * When the record became COMPLETED or FAILED.
   *
   * @generated from field: google.protobuf.Timestamp completed_at = 13;
   */
  completedAt?: Timestamp | undefined;

  /**
   * When the record may be purged: the moment it left PROCESSING plus its
   * retention. Unset while PROCESSING.
   *
   * @generated from field: google.protobuf.Timestamp expires_at = 14;
   */
  expiresAt?: Timestamp | undefined;

  /**
   * The policy of idemd's config file that applied when the record was last
   * acquired: the policy's namespace globs joined by commas ("payments.*").
   * Empty when no policy matched the namespace and the server's defaults
   * applied. A policy sets the lease and retention a Claim gets when it
   * sends none, and the longest lease a Claim or Heartbeat may ask for.
   *
   * @generated from field: string policy = 15;
   */
  policy: string;

  /**
   * The tenant that owns the record. Set in AdminService answers, where an
   * operator may see several tenants' records; empty elsewhere, where it is
   * always the caller's.
   *
   * @generated from field: string tenant = 16;
   */
  tenant: string;

  /**
   * True when that policy says on_lease_expiry: hold: a lease that runs out
   * with no Complete or Fail makes the record UNRESOLVED instead of open to
   * a takeover.
   *
   * @generated from field: bool hold = 17;
   */
  hold: boolean;

  /**
   * The job's steps (StartStep, CompleteStep), in the order they were
   * first recorded; empty when it has none. Set in the answers of Claim
   * (whatever the outcome), Lookup, BatchClaim, BatchLookup and
   * AdminService; the answers of Complete, Fail and Heartbeat leave it
   * empty.
   *
   * @generated from field: repeated idem.v1.Step steps = 30;
   */
  steps: Step[];

  /**
   * True when the policy of the latest step call said on_unfinished_step:
   * hold: a Claim that would take the record over while a step is STARTED
   * makes it UNRESOLVED instead. Set where steps is.
   *
   * @generated from field: bool hold_unfinished = 31;
   */
  holdUnfinished: boolean;
};

/**
 * Describes the message idem.v1.Record.
 * Use `create(RecordSchema)` to create a new message.
 */
export const RecordSchema: GenMessage<Record> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 0);

/**
 * Step is one named step of a job.
 *
 * @generated from message idem.v1.Step
 */
export type Step = Message<"idem.v1.Step"> & {
  /**
   * The step's name, unique in its job.
   *
   * @generated from field: string name = 1;
   */
  name: string;

  /**
   * STARTED or FINISHED.
   *
   * @generated from field: idem.v1.StepState state = 2;
   */
  state: StepState;

  /**
   * The result CompleteStep recorded (FINISHED only; may be empty).
   *
   * @generated from field: bytes result = 3;
   */
  result: Uint8Array;

  /**
   * The token of the holder that last wrote the step: the one that
   * finished it, or, while it is STARTED, that started it.
   *
   * @generated from field: int64 token = 4;
   */
  token: bigint;

  /**
   * When the step was started; for a step finished without StartStep, when
   * it finished.
   *
   * @generated from field: google.protobuf.Timestamp started_at = 5;
   */
  startedAt?: Timestamp | undefined;

  /**
   * When the step finished; unset while it is STARTED.
   *
   * @generated from field: google.protobuf.Timestamp finished_at = 6;
   */
  finishedAt?: Timestamp | undefined;
};

/**
 * Describes the message idem.v1.Step.
 * Use `create(StepSchema)` to create a new message.
 */
export const StepSchema: GenMessage<Step> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 1);

/**
 * ClaimRequest asks for the right to perform one job.
 *
 * @generated from message idem.v1.ClaimRequest
 */
export type ClaimRequest = Message<"idem.v1.ClaimRequest"> & {
  /**
   * The job type or scope, e.g. "process_payment". It must match
   * ^[a-z0-9][a-z0-9_.-]{0,63}$.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The idempotency key, chosen once when the job was created: 1 to 256 bytes
   * of UTF-8 without control characters.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * Optional hash of the request (at most 64 bytes, e.g. SHA-256 of the
   * canonical job payload). It is stored when the record is created; a later
   * Claim with a different non-empty fingerprint is rejected with
   * FAILED_PRECONDITION / FINGERPRINT_MISMATCH.
   *
   * @generated from field: bytes fingerprint = 3;
   */
  fingerprint: Uint8Array;

  /**
   * How long the lease lasts without a Heartbeat. Default 5 minutes; bounds
   * 1 second to 24 hours. A policy of idemd's config file that matches the
   * namespace may set another default (its lease_ttl) and a lower bound
   * (its max_lease_ttl): asking for more is INVALID_ARGUMENT /
   * INVALID_LEASE_TTL, naming the policy. Record.policy names it.
   *
   * @generated from field: google.protobuf.Duration lease_ttl = 4;
   */
  leaseTtl?: Duration | undefined;

  /**
   * Optional id of the caller's attempt (at most 128 bytes of UTF-8 without
   * NUL, e.g. a UUID).
   * Repeating a Claim with the same claimant while its lease lives returns
   * ACQUIRED again with the same token, so a Claim whose response was lost
   * can be retried safely.
   *
   * @generated from field: string claimant = 5;
   */
  claimant: string;

  /**
   * How long the record is kept after it leaves PROCESSING, before it may be
   * purged. Default 24 hours, or the retention of the policy that matches
   * the namespace; bounds 1 minute to 90 days.
   *
   * @generated from field: google.protobuf.Duration retention = 6;
   */
  retention?: Duration | undefined;

  /**
   * How long to wait, when the answer would be IN_PROGRESS, for the holder
   * to finish. Unset or 0 answers at once (IN_PROGRESS with retry_after).
   * Otherwise the call waits until the record is COMPLETED or FAILED (the
   * answer is that outcome with the stored result or error), or can be
   * acquired (RELEASED, or its lease ran out: the waiting Claim acquires it
   * and gets ACQUIRED; of several waiting Claims one does, and the others
   * keep waiting), or the wait runs out (IN_PROGRESS, as without a wait).
   * A Complete or Fail on any replica wakes the waiting Claim at once
   * (within about 250 ms where idemd sits behind a transaction pooler with
   * no direct connection to listen on); the client does not poll. The wait
   * never outlasts the call's own deadline: it ends early enough for the
   * answer to arrive in time. At most 60 seconds (INVALID_ARGUMENT /
   * INVALID_WAIT outside 0 to 60 s). When the
   * server already holds as many waiting Claims as it allows (in all, or for
   * the tenant), the Claim answers IN_PROGRESS at once, as without a wait.
   *
   * @generated from field: google.protobuf.Duration wait = 7;
   */
  wait?: Duration | undefined;
};

/**
 * Describes the message idem.v1.ClaimRequest.
 * Use `create(ClaimRequestSchema)` to create a new message.
 */
export const ClaimRequestSchema: GenMessage<ClaimRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 2);

/**
 * ClaimResponse tells the caller what to do.
 *
 * @generated from message idem.v1.ClaimResponse
 */
export type ClaimResponse = Message<"idem.v1.ClaimResponse"> & {
  /**
   * What to do: see Outcome.
   *
   * @generated from field: idem.v1.Outcome outcome = 1;
   */
  outcome: Outcome;

  /**
   * The record after the Claim.
   *
   * @generated from field: idem.v1.Record record = 2;
   */
  record?: Record | undefined;

  /**
   * For IN_PROGRESS: how long until the holder's lease runs out. A Claim
   * after that may acquire the record.
   *
   * @generated from field: google.protobuf.Duration retry_after = 3;
   */
  retryAfter?: Duration | undefined;
};

/**
 * Describes the message idem.v1.ClaimResponse.
 * Use `create(ClaimResponseSchema)` to create a new message.
 */
export const ClaimResponseSchema: GenMessage<ClaimResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 3);

/**
 * CompleteRequest records a job's success.
 *
 * @generated from message idem.v1.CompleteRequest
 */
export type CompleteRequest = Message<"idem.v1.CompleteRequest"> & {
  /**
   * The namespace of the Claim.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The key of the Claim.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * The token of the ACQUIRED outcome.
   *
   * @generated from field: int64 token = 3;
   */
  token: bigint;

  /**
   * The result to store and replay to later Claims: opaque bytes, at most
   * 64 KiB unless the server is configured otherwise (INVALID_ARGUMENT /
   * INVALID_RESULT). A request far over the limit is refused by gRPC itself
   * with RESOURCE_EXHAUSTED before idem reads it.
   *
   * @generated from field: bytes result = 4;
   */
  result: Uint8Array;
};

/**
 * Describes the message idem.v1.CompleteRequest.
 * Use `create(CompleteRequestSchema)` to create a new message.
 */
export const CompleteRequestSchema: GenMessage<CompleteRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 4);

/**
 * CompleteResponse carries the COMPLETED record.
 *
 * @generated from message idem.v1.CompleteResponse
 */
export type CompleteResponse = Message<"idem.v1.CompleteResponse"> & {
  /**
   * The record, now COMPLETED.
   *
   * @generated from field: idem.v1.Record record = 1;
   */
  record?: Record | undefined;
};

/**
 * Describes the message idem.v1.CompleteResponse.
 * Use `create(CompleteResponseSchema)` to create a new message.
 */
export const CompleteResponseSchema: GenMessage<CompleteResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 5);

/**
 * FailRequest records a job's failure.
 *
 * @generated from message idem.v1.FailRequest
 */
export type FailRequest = Message<"idem.v1.FailRequest"> & {
  /**
   * The namespace of the Claim.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The key of the Claim.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * The token of the ACQUIRED outcome.
   *
   * @generated from field: int64 token = 3;
   */
  token: bigint;

  /**
   * What went wrong: at most 4 KiB of UTF-8 without NUL (INVALID_ARGUMENT /
   * INVALID_ERROR otherwise). Replayed to later Claims when the failure is
   * permanent.
   *
   * @generated from field: string error = 4;
   */
  error: string;

  /**
   * true: give the record back (RELEASED) so that the next Claim acquires it.
   * false: the failure is permanent (FAILED) and is replayed to every later
   * Claim.
   *
   * @generated from field: bool retryable = 5;
   */
  retryable: boolean;
};

/**
 * Describes the message idem.v1.FailRequest.
 * Use `create(FailRequestSchema)` to create a new message.
 */
export const FailRequestSchema: GenMessage<FailRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 6);

/**
 * FailResponse carries the FAILED or RELEASED record.
 *
 * @generated from message idem.v1.FailResponse
 */
export type FailResponse = Message<"idem.v1.FailResponse"> & {
  /**
   * The record, now FAILED or RELEASED.
   *
   * @generated from field: idem.v1.Record record = 1;
   */
  record?: Record | undefined;
};

/**
 * Describes the message idem.v1.FailResponse.
 * Use `create(FailResponseSchema)` to create a new message.
 */
export const FailResponseSchema: GenMessage<FailResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 7);

/**
 * HeartbeatRequest extends a lease.
 *
 * @generated from message idem.v1.HeartbeatRequest
 */
export type HeartbeatRequest = Message<"idem.v1.HeartbeatRequest"> & {
  /**
   * The namespace of the Claim.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The key of the Claim.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * The token of the ACQUIRED outcome.
   *
   * @generated from field: int64 token = 3;
   */
  token: bigint;

  /**
   * The new lease, counted from now. Default 5 minutes; bounds 1 second to
   * 24 hours. The namespace's policy, when one matches, sets the default
   * and lowers the bound as it does for Claim.
   *
   * @generated from field: google.protobuf.Duration lease_ttl = 4;
   */
  leaseTtl?: Duration | undefined;
};

/**
 * Describes the message idem.v1.HeartbeatRequest.
 * Use `create(HeartbeatRequestSchema)` to create a new message.
 */
export const HeartbeatRequestSchema: GenMessage<HeartbeatRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 8);

/**
 * HeartbeatResponse carries the record with its new lease.
 *
 * @generated from message idem.v1.HeartbeatResponse
 */
export type HeartbeatResponse = Message<"idem.v1.HeartbeatResponse"> & {
  /**
   * The record, PROCESSING with the new lease_expires_at.
   *
   * @generated from field: idem.v1.Record record = 1;
   */
  record?: Record | undefined;
};

/**
 * Describes the message idem.v1.HeartbeatResponse.
 * Use `create(HeartbeatResponseSchema)` to create a new message.
 */
export const HeartbeatResponseSchema: GenMessage<HeartbeatResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 9);

/**
 * LookupRequest reads one record.
 *
 * @generated from message idem.v1.LookupRequest
 */
export type LookupRequest = Message<"idem.v1.LookupRequest"> & {
  /**
   * The namespace of the record.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The key of the record.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * Also read the record's timeline (LookupResponse.history). A record
   * that does not exist is NOT_FOUND all the same.
   *
   * @generated from field: bool include_history = 3;
   */
  includeHistory: boolean;
};

/**
 * Describes the message idem.v1.LookupRequest.
 * Use `create(LookupRequestSchema)` to create a new message.
 */
export const LookupRequestSchema: GenMessage<LookupRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 10);

/**
 * LookupResponse carries the record.
 *
 * @generated from message idem.v1.LookupResponse
 */
export type LookupResponse = Message<"idem.v1.LookupResponse"> & {
  /**
   * The record.
   *
   * @generated from field: idem.v1.Record record = 1;
   */
  record?: Record | undefined;

  /**
   * With include_history: the exceptions in the life of the record's key,
   * oldest first (see TimelineEntry); empty for a record whose life had
   * none. At most the latest 1000.
   *
   * @generated from field: repeated idem.v1.TimelineEntry history = 2;
   */
  history: TimelineEntry[];
};

/**
 * Describes the message idem.v1.LookupResponse.
 * Use `create(LookupResponseSchema)` to create a new message.
 */
export const LookupResponseSchema: GenMessage<LookupResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 11);

/**
 * BatchClaimRequest claims many jobs (IdempotencyService.BatchClaim).
 *
 * @generated from message idem.v1.BatchClaimRequest
 */
export type BatchClaimRequest = Message<"idem.v1.BatchClaimRequest"> & {
  /**
   * The Claims, each as Claim takes it.
   *
   * @generated from field: repeated idem.v1.ClaimRequest requests = 1;
   */
  requests: ClaimRequest[];
};

/**
 * Describes the message idem.v1.BatchClaimRequest.
 * Use `create(BatchClaimRequestSchema)` to create a new message.
 */
export const BatchClaimRequestSchema: GenMessage<BatchClaimRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 12);

/**
 * BatchClaimResponse answers each Claim of a BatchClaimRequest.
 *
 * @generated from message idem.v1.BatchClaimResponse
 */
export type BatchClaimResponse = Message<"idem.v1.BatchClaimResponse"> & {
  /**
   * One per request, in the order of the requests.
   *
   * @generated from field: repeated idem.v1.BatchClaimResult results = 1;
   */
  results: BatchClaimResult[];
};

/**
 * Describes the message idem.v1.BatchClaimResponse.
 * Use `create(BatchClaimResponseSchema)` to create a new message.
 */
export const BatchClaimResponseSchema: GenMessage<BatchClaimResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 13);

/**
 * BatchClaimResult is one Claim's answer in a batch.
 *
 * @generated from message idem.v1.BatchClaimResult
 */
export type BatchClaimResult = Message<"idem.v1.BatchClaimResult"> & {
  /**
   * The Claim's response, or its error.
   *
   * @generated from oneof idem.v1.BatchClaimResult.result
   */
  result: {
    /**
     * What Claim would have answered.
     *
     * @generated from field: idem.v1.ClaimResponse response = 1;
     */
    value: ClaimResponse;
    case: "response";
  } | {
    /**
     * The error Claim would have returned, with its ErrorInfo.
     *
     * @generated from field: google.rpc.Status error = 2;
     */
    value: Status;
    case: "error";
  } | { case: undefined; value?: undefined };
};

/**
 * Describes the message idem.v1.BatchClaimResult.
 * Use `create(BatchClaimResultSchema)` to create a new message.
 */
export const BatchClaimResultSchema: GenMessage<BatchClaimResult> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 14);

/**
 * BatchCompleteRequest completes many jobs (IdempotencyService.BatchComplete).
 *
 * @generated from message idem.v1.BatchCompleteRequest
 */
export type BatchCompleteRequest = Message<"idem.v1.BatchCompleteRequest"> & {
  /**
   * The Completes, each as Complete takes it.
   *
   * @generated from field: repeated idem.v1.CompleteRequest requests = 1;
   */
  requests: CompleteRequest[];
};

/**
 * Describes the message idem.v1.BatchCompleteRequest.
 * Use `create(BatchCompleteRequestSchema)` to create a new message.
 */
export const BatchCompleteRequestSchema: GenMessage<BatchCompleteRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 15);

/**
 * BatchCompleteResponse answers each Complete of a BatchCompleteRequest.
 *
 * @generated from message idem.v1.BatchCompleteResponse
 */
export type BatchCompleteResponse = Message<"idem.v1.BatchCompleteResponse"> & {
  /**
   * One per request, in the order of the requests.
   *
   * @generated from field: repeated idem.v1.BatchCompleteResult results = 1;
   */
  results: BatchCompleteResult[];
};

/**
 * Describes the message idem.v1.BatchCompleteResponse.
 * Use `create(BatchCompleteResponseSchema)` to create a new message.
 */
export const BatchCompleteResponseSchema: GenMessage<BatchCompleteResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 16);

/**
 * BatchCompleteResult is one Complete's answer in a batch.
 *
 * @generated from message idem.v1.BatchCompleteResult
 */
export type BatchCompleteResult = Message<"idem.v1.BatchCompleteResult"> & {
  /**
   * The Complete's response, or its error.
   *
   * @generated from oneof idem.v1.BatchCompleteResult.result
   */
  result: {
    /**
     * What Complete would have answered.
     *
     * @generated from field: idem.v1.CompleteResponse response = 1;
     */
    value: CompleteResponse;
    case: "response";
  } | {
    /**
     * The error Complete would have returned, with its ErrorInfo.
     *
     * @generated from field: google.rpc.Status error = 2;
     */
    value: Status;
    case: "error";
  } | { case: undefined; value?: undefined };
};

/**
 * Describes the message idem.v1.BatchCompleteResult.
 * Use `create(BatchCompleteResultSchema)` to create a new message.
 */
export const BatchCompleteResultSchema: GenMessage<BatchCompleteResult> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 17);

/**
 * BatchFailRequest fails many jobs (IdempotencyService.BatchFail).
 *
 * @generated from message idem.v1.BatchFailRequest
 */
export type BatchFailRequest = Message<"idem.v1.BatchFailRequest"> & {
  /**
   * The Fails, each as Fail takes it.
   *
   * @generated from field: repeated idem.v1.FailRequest requests = 1;
   */
  requests: FailRequest[];
};

/**
 * Describes the message idem.v1.BatchFailRequest.
 * Use `create(BatchFailRequestSchema)` to create a new message.
 */
export const BatchFailRequestSchema: GenMessage<BatchFailRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 18);

/**
 * BatchFailResponse answers each Fail of a BatchFailRequest.
 *
 * @generated from message idem.v1.BatchFailResponse
 */
export type BatchFailResponse = Message<"idem.v1.BatchFailResponse"> & {
  /**
   * One per request, in the order of the requests.
   *
   * @generated from field: repeated idem.v1.BatchFailResult results = 1;
   */
  results: BatchFailResult[];
};

/**
 * Describes the message idem.v1.BatchFailResponse.
 * Use `create(BatchFailResponseSchema)` to create a new message.
 */
export const BatchFailResponseSchema: GenMessage<BatchFailResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 19);

/**
 * BatchFailResult is one Fail's answer in a batch.
 *
 * @generated from message idem.v1.BatchFailResult
 */
export type BatchFailResult = Message<"idem.v1.BatchFailResult"> & {
  /**
   * The Fail's response, or its error.
   *
   * @generated from oneof idem.v1.BatchFailResult.result
   */
  result: {
    /**
     * What Fail would have answered.
     *
     * @generated from field: idem.v1.FailResponse response = 1;
     */
    value: FailResponse;
    case: "response";
  } | {
    /**
     * The error Fail would have returned, with its ErrorInfo.
     *
     * @generated from field: google.rpc.Status error = 2;
     */
    value: Status;
    case: "error";
  } | { case: undefined; value?: undefined };
};

/**
 * Describes the message idem.v1.BatchFailResult.
 * Use `create(BatchFailResultSchema)` to create a new message.
 */
export const BatchFailResultSchema: GenMessage<BatchFailResult> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 20);

/**
 * BatchHeartbeatRequest extends many leases (IdempotencyService.BatchHeartbeat).
 *
 * @generated from message idem.v1.BatchHeartbeatRequest
 */
export type BatchHeartbeatRequest = Message<"idem.v1.BatchHeartbeatRequest"> & {
  /**
   * The Heartbeats, each as Heartbeat takes it.
   *
   * @generated from field: repeated idem.v1.HeartbeatRequest requests = 1;
   */
  requests: HeartbeatRequest[];
};

/**
 * Describes the message idem.v1.BatchHeartbeatRequest.
 * Use `create(BatchHeartbeatRequestSchema)` to create a new message.
 */
export const BatchHeartbeatRequestSchema: GenMessage<BatchHeartbeatRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 21);

/**
 * BatchHeartbeatResponse answers each Heartbeat of a BatchHeartbeatRequest.
 *
 * @generated from message idem.v1.BatchHeartbeatResponse
 */
export type BatchHeartbeatResponse = Message<"idem.v1.BatchHeartbeatResponse"> & {
  /**
   * One per request, in the order of the requests.
   *
   * @generated from field: repeated idem.v1.BatchHeartbeatResult results = 1;
   */
  results: BatchHeartbeatResult[];
};

/**
 * Describes the message idem.v1.BatchHeartbeatResponse.
 * Use `create(BatchHeartbeatResponseSchema)` to create a new message.
 */
export const BatchHeartbeatResponseSchema: GenMessage<BatchHeartbeatResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 22);

/**
 * BatchHeartbeatResult is one Heartbeat's answer in a batch.
 *
 * @generated from message idem.v1.BatchHeartbeatResult
 */
export type BatchHeartbeatResult = Message<"idem.v1.BatchHeartbeatResult"> & {
  /**
   * The Heartbeat's response, or its error.
   *
   * @generated from oneof idem.v1.BatchHeartbeatResult.result
   */
  result: {
    /**
     * What Heartbeat would have answered.
     *
     * @generated from field: idem.v1.HeartbeatResponse response = 1;
     */
    value: HeartbeatResponse;
    case: "response";
  } | {
    /**
     * The error Heartbeat would have returned, with its ErrorInfo.
     *
     * @generated from field: google.rpc.Status error = 2;
     */
    value: Status;
    case: "error";
  } | { case: undefined; value?: undefined };
};

/**
 * Describes the message idem.v1.BatchHeartbeatResult.
 * Use `create(BatchHeartbeatResultSchema)` to create a new message.
 */
export const BatchHeartbeatResultSchema: GenMessage<BatchHeartbeatResult> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 23);

/**
 * BatchLookupRequest reads many records (IdempotencyService.BatchLookup).
 *
 * @generated from message idem.v1.BatchLookupRequest
 */
export type BatchLookupRequest = Message<"idem.v1.BatchLookupRequest"> & {
  /**
   * The Lookups, each as Lookup takes it.
   *
   * @generated from field: repeated idem.v1.LookupRequest requests = 1;
   */
  requests: LookupRequest[];
};

/**
 * Describes the message idem.v1.BatchLookupRequest.
 * Use `create(BatchLookupRequestSchema)` to create a new message.
 */
export const BatchLookupRequestSchema: GenMessage<BatchLookupRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 24);

/**
 * BatchLookupResponse answers each Lookup of a BatchLookupRequest.
 *
 * @generated from message idem.v1.BatchLookupResponse
 */
export type BatchLookupResponse = Message<"idem.v1.BatchLookupResponse"> & {
  /**
   * One per request, in the order of the requests.
   *
   * @generated from field: repeated idem.v1.BatchLookupResult results = 1;
   */
  results: BatchLookupResult[];
};

/**
 * Describes the message idem.v1.BatchLookupResponse.
 * Use `create(BatchLookupResponseSchema)` to create a new message.
 */
export const BatchLookupResponseSchema: GenMessage<BatchLookupResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 25);

/**
 * BatchLookupResult is one Lookup's answer in a batch.
 *
 * @generated from message idem.v1.BatchLookupResult
 */
export type BatchLookupResult = Message<"idem.v1.BatchLookupResult"> & {
  /**
   * The Lookup's response, or its error (NOT_FOUND for a record that does
   * not exist).
   *
   * @generated from oneof idem.v1.BatchLookupResult.result
   */
  result: {
    /**
     * What Lookup would have answered.
     *
     * @generated from field: idem.v1.LookupResponse response = 1;
     */
    value: LookupResponse;
    case: "response";
  } | {
    /**
     * The error Lookup would have returned, with its ErrorInfo.
     *
     * @generated from field: google.rpc.Status error = 2;
     */
    value: Status;
    case: "error";
  } | { case: undefined; value?: undefined };
};

/**
 * Describes the message idem.v1.BatchLookupResult.
 * Use `create(BatchLookupResultSchema)` to create a new message.
 */
export const BatchLookupResultSchema: GenMessage<BatchLookupResult> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 26);

/**
 * StartStepRequest marks a step of a held job STARTED.
 *
 * @generated from message idem.v1.StartStepRequest
 */
export type StartStepRequest = Message<"idem.v1.StartStepRequest"> & {
  /**
   * The namespace of the Claim.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The key of the Claim.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * The token of the ACQUIRED outcome.
   *
   * @generated from field: int64 token = 3;
   */
  token: bigint;

  /**
   * The step's name: 1 to 128 bytes of UTF-8 without control characters
   * (INVALID_ARGUMENT / INVALID_STEP_NAME otherwise), unique in the job.
   * Its bytes count toward the job's --max-step-bytes.
   *
   * @generated from field: string step = 4;
   */
  step: string;
};

/**
 * Describes the message idem.v1.StartStepRequest.
 * Use `create(StartStepRequestSchema)` to create a new message.
 */
export const StartStepRequestSchema: GenMessage<StartStepRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 27);

/**
 * StartStepResponse carries the step as stored.
 *
 * @generated from message idem.v1.StartStepResponse
 */
export type StartStepResponse = Message<"idem.v1.StartStepResponse"> & {
  /**
   * The step, STARTED.
   *
   * @generated from field: idem.v1.Step step = 1;
   */
  step?: Step | undefined;
};

/**
 * Describes the message idem.v1.StartStepResponse.
 * Use `create(StartStepResponseSchema)` to create a new message.
 */
export const StartStepResponseSchema: GenMessage<StartStepResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 28);

/**
 * CompleteStepRequest records a step of a held job FINISHED.
 *
 * @generated from message idem.v1.CompleteStepRequest
 */
export type CompleteStepRequest = Message<"idem.v1.CompleteStepRequest"> & {
  /**
   * The namespace of the Claim.
   *
   * @generated from field: string namespace = 1;
   */
  namespace: string;

  /**
   * The key of the Claim.
   *
   * @generated from field: string key = 2;
   */
  key: string;

  /**
   * The token of the ACQUIRED outcome.
   *
   * @generated from field: int64 token = 3;
   */
  token: bigint;

  /**
   * The step's name, as StartStep takes it.
   *
   * @generated from field: string step = 4;
   */
  step: string;

  /**
   * The step's result: opaque bytes, at most the server's result limit
   * (INVALID_ARGUMENT / INVALID_RESULT). A job's steps hold at most
   * --max-step-bytes (64 KiB by default) of names and results together,
   * and at most --max-steps (64 by default) steps (RESOURCE_EXHAUSTED /
   * STEPS_TOO_LARGE, TOO_MANY_STEPS).
   *
   * @generated from field: bytes result = 5;
   */
  result: Uint8Array;
};

/**
 * Describes the message idem.v1.CompleteStepRequest.
 * Use `create(CompleteStepRequestSchema)` to create a new message.
 */
export const CompleteStepRequestSchema: GenMessage<CompleteStepRequest> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 29);

/**
 * CompleteStepResponse carries the step as stored.
 *
 * @generated from message idem.v1.CompleteStepResponse
 */
export type CompleteStepResponse = Message<"idem.v1.CompleteStepResponse"> & {
  /**
   * The step, FINISHED.
   *
   * @generated from field: idem.v1.Step step = 1;
   */
  step?: Step | undefined;
};

/**
 * Describes the message idem.v1.CompleteStepResponse.
 * Use `create(CompleteStepResponseSchema)` to create a new message.
 */
export const CompleteStepResponseSchema: GenMessage<CompleteStepResponse> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 30);

/**
 * TimelineEntry is one exception in the life of a record's key: what
 * happened, when, and who did it. The ordinary path (a Claim that creates
 * the record, a Complete by its holder, a Heartbeat, a Claim answered from
 * the record) leaves no entry. Entries live as long as their record and are
 * purged with it. A deleted record's entries, its DELETED entry last, stay
 * under the key: they are shown with the next record of the key and purged
 * with it, or, when no record of the key follows, dropped once the deleted
 * record's retention has passed since the deletion.
 *
 * @generated from message idem.v1.TimelineEntry
 */
export type TimelineEntry = Message<"idem.v1.TimelineEntry"> & {
  /**
   * What happened.
   *
   * @generated from field: idem.v1.TimelineEntryKind kind = 1;
   */
  kind: TimelineEntryKind;

  /**
   * When, by the store's clock.
   *
   * @generated from field: google.protobuf.Timestamp at = 2;
   */
  at?: Timestamp | undefined;

  /**
   * The record's token when it happened; for TAKEN_OVER, the new one.
   *
   * @generated from field: int64 token = 3;
   */
  token: bigint;

  /**
   * The state it left the record in; STATE_UNSPECIFIED for DELETED.
   *
   * @generated from field: idem.v1.State state = 4;
   */
  state: State;

  /**
   * TAKEN_OVER: the token taken over.
   *
   * @generated from field: int64 previous_token = 5;
   */
  previousToken: bigint;

  /**
   * TAKEN_OVER: the state the record was taken over from (PROCESSING: its
   * lease had run out; EXPIRED; RELEASED). RESOLVED: UNRESOLVED. DELETED:
   * the state it was deleted in. HELD: PROCESSING.
   *
   * @generated from field: idem.v1.State previous_state = 6;
   */
  previousState: State;

  /**
   * TAKEN_OVER: the new holder's claimant. FAILED, RELEASED, HELD: the
   * holder's. FINGERPRINT_MISMATCH: the refused Claim's.
   *
   * @generated from field: string claimant = 7;
   */
  claimant: string;

  /**
   * TAKEN_OVER: the claimant of the lease taken over.
   *
   * @generated from field: string previous_claimant = 8;
   */
  previousClaimant: string;

  /**
   * FAILED, RELEASED: the holder's error. RESOLVED as FAILED: the
   * resolution's error.
   *
   * @generated from field: string error = 9;
   */
  error: string;

  /**
   * RESOLVED, DELETED: who made the call.
   *
   * @generated from field: idem.v1.Actor actor = 10;
   */
  actor?: Actor | undefined;

  /**
   * RESOLVED, DELETED: the free-text reason the call gave; may be empty.
   *
   * @generated from field: string reason = 11;
   */
  reason: string;

  /**
   * FINGERPRINT_MISMATCH: the fingerprint the refused Claim carried (the
   * record keeps its own).
   *
   * @generated from field: bytes fingerprint = 12;
   */
  fingerprint: Uint8Array;
};

/**
 * Describes the message idem.v1.TimelineEntry.
 * Use `create(TimelineEntrySchema)` to create a new message.
 */
export const TimelineEntrySchema: GenMessage<TimelineEntry> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 31);

/**
 * Actor is who made a call that a timeline entry records.
 *
 * @generated from message idem.v1.Actor
 */
export type Actor = Message<"idem.v1.Actor"> & {
  /**
   * The caller's tenant.
   *
   * @generated from field: string tenant = 1;
   */
  tenant: string;

  /**
   * The name idemd's config gives the caller's token (named_tokens); empty
   * for a token without one, or a client certificate.
   *
   * @generated from field: string operator = 2;
   */
  operator: string;

  /**
   * The name the resolver gave (ResolverService.Resolve); empty for a
   * person's call.
   *
   * @generated from field: string resolver = 3;
   */
  resolver: string;
};

/**
 * Describes the message idem.v1.Actor.
 * Use `create(ActorSchema)` to create a new message.
 */
export const ActorSchema: GenMessage<Actor> = /*@__PURE__*/
  messageDesc(file_idem_v1_idem, 32);

/**
 * State is where a record is in its life.
 *
 * @generated from enum idem.v1.State
 */
export enum State {
  /**
   * Never sent by the server.
   *
   * @generated from enum value: STATE_UNSPECIFIED = 0;
   */
  UNSPECIFIED = 0,

  /**
   * A worker holds the record under a lease. A Claim gets IN_PROGRESS while
   * the lease lives, and ACQUIRED (a takeover) once it has run out.
   *
   * @generated from enum value: STATE_PROCESSING = 1;
   */
  PROCESSING = 1,

  /**
   * Terminal success: the result is stored and every Claim replays it.
   *
   * @generated from enum value: STATE_COMPLETED = 2;
   */
  COMPLETED = 2,

  /**
   * Terminal failure (Fail with retryable=false): the error is stored and
   * every Claim replays it.
   *
   * @generated from enum value: STATE_FAILED = 3;
   */
  FAILED = 3,

  /**
   * The holder gave the record back (Fail with retryable=true): the next
   * Claim acquires it.
   *
   * @generated from enum value: STATE_RELEASED = 4;
   */
  RELEASED = 4,

  /**
   * The lease ran out with no Complete or Fail (set by the sweeper): the next
   * Claim acquires it.
   *
   * @generated from enum value: STATE_EXPIRED = 5;
   */
  EXPIRED = 5,

  /**
   * Held for resolution: the record's policy says on_lease_expiry: hold
   * (Record.hold), and its lease ran out with no Complete or Fail (set by the
   * sweeper, or by the Claim that found it first). Nobody took it over, so
   * the worker that held it still has the current token: its late Complete
   * or Fail is accepted and resolves it (a Heartbeat makes it PROCESSING
   * again). Otherwise an operator resolves it with
   * AdminService.ResolveRecord. Every Claim meanwhile gets
   * OUTCOME_UNRESOLVED. It is never purged: it waits for a resolution.
   *
   * @generated from enum value: STATE_UNRESOLVED = 6;
   */
  UNRESOLVED = 6,
}

/**
 * Describes the enum idem.v1.State.
 */
export const StateSchema: GenEnum<State> = /*@__PURE__*/
  enumDesc(file_idem_v1_idem, 0);

/**
 * Outcome is the answer to a Claim.
 *
 * @generated from enum idem.v1.Outcome
 */
export enum Outcome {
  /**
   * Never sent by the server.
   *
   * @generated from enum value: OUTCOME_UNSPECIFIED = 0;
   */
  UNSPECIFIED = 0,

  /**
   * The caller holds the record with record.token until
   * record.lease_expires_at. Perform the side effect, then call Complete or
   * Fail with that token. record.attempt > 1 means an earlier attempt may
   * have done part of the work.
   *
   * @generated from enum value: OUTCOME_ACQUIRED = 1;
   */
  ACQUIRED = 1,

  /**
   * Another worker holds a live lease. Do not perform the side effect; retry
   * after retry_after, or let the queue redeliver the job. A Claim sent with
   * a wait gets it only when the wait ran out (or the server holds as many
   * waiting Claims as it allows).
   *
   * @generated from enum value: OUTCOME_IN_PROGRESS = 2;
   */
  IN_PROGRESS = 2,

  /**
   * The job completed earlier: record.result holds the stored result. Do not
   * perform the side effect again.
   *
   * @generated from enum value: OUTCOME_COMPLETED = 3;
   */
  COMPLETED = 3,

  /**
   * The job failed permanently earlier: record.error holds the stored error.
   * Do not perform the side effect.
   *
   * @generated from enum value: OUTCOME_FAILED = 4;
   */
  FAILED = 4,

  /**
   * The record is UNRESOLVED (see STATE_UNRESOLVED): an earlier attempt may
   * or may not have performed the side effect, and its policy says a person
   * or the late holder decides. Do not perform the side effect; park the
   * message (a dead-letter queue) until the record is resolved. A Claim
   * never takes an UNRESOLVED record over.
   *
   * @generated from enum value: OUTCOME_UNRESOLVED = 5;
   */
  UNRESOLVED = 5,
}

/**
 * Describes the enum idem.v1.Outcome.
 */
export const OutcomeSchema: GenEnum<Outcome> = /*@__PURE__*/
  enumDesc(file_idem_v1_idem, 1);

/**
 * StepState is where a step is.
 *
 * @generated from enum idem.v1.StepState
 */
export enum StepState {
  /**
   * Never sent by the server.
   *
   * @generated from enum value: STEP_STATE_UNSPECIFIED = 0;
   */
  UNSPECIFIED = 0,

  /**
   * StartStep said the step's effect was about to happen: it may or may
   * not have.
   *
   * @generated from enum value: STEP_STATE_STARTED = 1;
   */
  STARTED = 1,

  /**
   * CompleteStep recorded the step's result: its effect happened. A
   * FINISHED step never changes.
   *
   * @generated from enum value: STEP_STATE_FINISHED = 2;
   */
  FINISHED = 2,
}

/**
 * Describes the enum idem.v1.StepState.
 */
export const StepStateSchema: GenEnum<StepState> = /*@__PURE__*/
  enumDesc(file_idem_v1_idem, 2);

/**
 * TimelineEntryKind is what a TimelineEntry records.
 *
 * @generated from enum idem.v1.TimelineEntryKind
 */
export enum TimelineEntryKind {
  /**
   * Never sent by the server.
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_UNSPECIFIED = 0;
   */
  UNSPECIFIED = 0,

  /**
   * A Claim acquired the record from an earlier attempt: its lease had run
   * out (the holder stalled or died), it was EXPIRED, or RELEASED.
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_TAKEN_OVER = 1;
   */
  TAKEN_OVER = 1,

  /**
   * The holder's Fail with retryable=false: the record is FAILED.
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_FAILED = 2;
   */
  FAILED = 2,

  /**
   * The holder's Fail with retryable=true: the record is RELEASED.
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_RELEASED = 3;
   */
  RELEASED = 3,

  /**
   * The lease ran out under a hold policy: the record is UNRESOLVED (by
   * the sweeper, or by the Claim that found it so).
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_HELD = 4;
   */
  HELD = 4,

  /**
   * A person (AdminService.ResolveRecord) or a resolver
   * (ResolverService.Resolve) resolved the UNRESOLVED record.
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_RESOLVED = 5;
   */
  RESOLVED = 5,

  /**
   * AdminService.DeleteRecord deleted the record.
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_DELETED = 6;
   */
  DELETED = 6,

  /**
   * A Claim with another fingerprint was refused (FINGERPRINT_MISMATCH).
   * One entry per lease and refused fingerprint, however often the Claim
   * comes back.
   *
   * @generated from enum value: TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH = 7;
   */
  FINGERPRINT_MISMATCH = 7,
}

/**
 * Describes the enum idem.v1.TimelineEntryKind.
 */
export const TimelineEntryKindSchema: GenEnum<TimelineEntryKind> = /*@__PURE__*/
  enumDesc(file_idem_v1_idem, 3);

/**
 * IdempotencyService coordinates workers so that each job's side effect
 * happens once.
 *
 * @generated from service idem.v1.IdempotencyService
 */
export const IdempotencyService: GenService<{
  /**
   * Claim asks for the right to perform the job identified by namespace and
   * key. It is one atomic step: it creates the record, or takes over a
   * RELEASED or EXPIRED record or one whose lease ran out, or reports the
   * existing record. A record whose policy holds it (Record.hold) is never
   * taken over: once its lease runs out it is UNRESOLVED (this Claim makes it
   * so if the sweeper has not) and the answer is OUTCOME_UNRESOLVED. See
   * Outcome for what to do with each answer.
   *
   * @generated from rpc idem.v1.IdempotencyService.Claim
   */
  claim: {
    methodKind: "unary";
    input: typeof ClaimRequestSchema;
    output: typeof ClaimResponseSchema;
  },
  /**
   * Complete records the job's success and its result. Only the current
   * token's holder may call it. Repeating it with the same token after a
   * lost response returns the stored record unchanged.
   *
   * @generated from rpc idem.v1.IdempotencyService.Complete
   */
  complete: {
    methodKind: "unary";
    input: typeof CompleteRequestSchema;
    output: typeof CompleteResponseSchema;
  },
  /**
   * Fail records the job's failure. With retryable=true the record becomes
   * RELEASED and the next Claim acquires it; otherwise it becomes FAILED and
   * every later Claim replays the error. Repeating it with the same token
   * returns the stored record unchanged.
   *
   * @generated from rpc idem.v1.IdempotencyService.Fail
   */
  fail: {
    methodKind: "unary";
    input: typeof FailRequestSchema;
    output: typeof FailResponseSchema;
  },
  /**
   * Heartbeat extends the lease of a long-running job. Call it well before
   * the lease runs out (the Go SDK calls it every third of the lease). On an
   * EXPIRED record that nobody took over it makes the record PROCESSING
   * again.
   *
   * @generated from rpc idem.v1.IdempotencyService.Heartbeat
   */
  heartbeat: {
    methodKind: "unary";
    input: typeof HeartbeatRequestSchema;
    output: typeof HeartbeatResponseSchema;
  },
  /**
   * Lookup reads a record without changing it.
   *
   * @generated from rpc idem.v1.IdempotencyService.Lookup
   */
  lookup: {
    methodKind: "unary";
    input: typeof LookupRequestSchema;
    output: typeof LookupResponseSchema;
  },
  /**
   * BatchClaim is Claim for many jobs. An item's wait must be unset or 0
   * (INVALID_ARGUMENT / INVALID_WAIT otherwise): a batch answers at once.
   *
   * @generated from rpc idem.v1.IdempotencyService.BatchClaim
   */
  batchClaim: {
    methodKind: "unary";
    input: typeof BatchClaimRequestSchema;
    output: typeof BatchClaimResponseSchema;
  },
  /**
   * BatchComplete is Complete for many jobs.
   *
   * @generated from rpc idem.v1.IdempotencyService.BatchComplete
   */
  batchComplete: {
    methodKind: "unary";
    input: typeof BatchCompleteRequestSchema;
    output: typeof BatchCompleteResponseSchema;
  },
  /**
   * BatchFail is Fail for many jobs.
   *
   * @generated from rpc idem.v1.IdempotencyService.BatchFail
   */
  batchFail: {
    methodKind: "unary";
    input: typeof BatchFailRequestSchema;
    output: typeof BatchFailResponseSchema;
  },
  /**
   * BatchHeartbeat is Heartbeat for many jobs: it keeps a whole delivery's
   * leases alive while its jobs run.
   *
   * @generated from rpc idem.v1.IdempotencyService.BatchHeartbeat
   */
  batchHeartbeat: {
    methodKind: "unary";
    input: typeof BatchHeartbeatRequestSchema;
    output: typeof BatchHeartbeatResponseSchema;
  },
  /**
   * BatchLookup is Lookup for many records.
   *
   * @generated from rpc idem.v1.IdempotencyService.BatchLookup
   */
  batchLookup: {
    methodKind: "unary";
    input: typeof BatchLookupRequestSchema;
    output: typeof BatchLookupResponseSchema;
  },
  /**
   * StartStep marks a step STARTED before its effect, so that a successor
   * can tell "finished" from "may have happened".
   *
   * @generated from rpc idem.v1.IdempotencyService.StartStep
   */
  startStep: {
    methodKind: "unary";
    input: typeof StartStepRequestSchema;
    output: typeof StartStepResponseSchema;
  },
  /**
   * CompleteStep records a step FINISHED with its result, whether or not
   * it was started.
   *
   * @generated from rpc idem.v1.IdempotencyService.CompleteStep
   */
  completeStep: {
    methodKind: "unary";
    input: typeof CompleteStepRequestSchema;
    output: typeof CompleteStepResponseSchema;
  },
}> = /*@__PURE__*/
  serviceDesc(file_idem_v1_idem, 0);

