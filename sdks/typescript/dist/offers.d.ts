import type { Client } from "./transport.js";
/** What a read asks: its kind, the agent, and MCP's params of the method. */
export interface Read {
    kind: "prompt" | "resource" | "complete";
    agent: string;
    params: Record<string, unknown>;
}
/** Answers a read with MCP's result object (`{messages}`, `{contents}`, `{completion}`). */
export type ReadHandler = (read: Read) => Record<string, unknown> | Promise<Record<string, unknown>>;
/** Thrown by a read's handler: the agent gets `code: message`. */
export declare class ReadError extends Error {
    readonly code: string;
    constructor(code: string, message: string);
}
/** One prompt, resource or template as registered, with its handlers. */
export interface Offer {
    group: string;
    kind: "prompts" | "resources" | "resource_templates";
    def: Record<string, unknown>;
    read: ReadHandler;
    complete?: ReadHandler;
}
/** The URIs of a level-1 template: each `{var}` one or more characters but `/`. */
export declare function templatePattern(template: string): RegExp;
/** A group's `prompts`, `resources` and `resource_templates` for its registration. */
export declare function definitions(offers: Offer[], group: string): Record<string, Record<string, unknown>[]>;
/** Runs the handler of one `client_offer.request` and posts its answer. */
export declare function answerRead(offers: Offer[], request: Record<string, unknown>, client: Client, clientId: string): Promise<void>;
