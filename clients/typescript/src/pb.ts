// The generated code of proto/idem/v1, exported as `pb` from the package.
export * from "./gen/idem/v1/idem_pb.js";
export * from "./gen/idem/v1/admin_pb.js";
export * from "./gen/idem/v1/error_reason_pb.js";
