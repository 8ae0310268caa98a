/** Refusals retrying cannot fix, met opening the event stream or registering: the app stops. */
export declare const FATAL: ReadonlySet<string>;
/** Refusals of a claim, result, progress report or question that say the call is another
 * client's or over: dropped quietly. */
export declare const LOST_RACE: ReadonlySet<string>;
/** Refusals of a registration that a new stream may not meet (the stream closed since hello,
 * the store is away): the app opens a new stream after its backoff and registers again. */
export declare const REGISTER_AGAIN: ReadonlySet<string>;
/** The refusal of a stream opened with a resume key the broker no longer holds; only on an open
 * that carried a key: the key is dropped and the stream opened again without it. */
export declare const RESUME_REFUSED = "invalid_parameter";
