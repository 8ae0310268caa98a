// How the app reads a refusal: the table every SDK shares.
//
// It is `ErrorCode::APP_FATAL`, `LOST_RACE`, `REGISTER_AGAIN` and `RESUME_REFUSED` in the protocol crate
// (`protocol/src/codes.rs`, docs/protocol.md "How an app reads a refusal"); the suite compares
// these sets with `testdata/sdk/codes.json`, which the protocol's tests check against that table.
/** Refusals retrying cannot fix, met opening the event stream or registering: the app stops. */
export const FATAL = new Set(["unauthorized", "forbidden", "invalid_parameter", "unknown_parameter"]);
/** Refusals of a claim, result, progress report or question that say the call is another
 * client's or over: dropped quietly. */
export const LOST_RACE = new Set(["already_claimed", "owned_by_other", "already_settled", "unknown_request", "not_provider", "not_claimant"]);
/** Refusals of a registration that a new stream may not meet (the stream closed since hello,
 * the store is away): the app opens a new stream after its backoff and registers again. */
export const REGISTER_AGAIN = new Set(["unknown_client", "store_unavailable"]);
/** The refusal of a stream opened with a resume key the broker no longer holds; only on an open
 * that carried a key: the key is dropped and the stream opened again without it. */
export const RESUME_REFUSED = "invalid_parameter";
