/** One MCP content block. */
export type ContentBlock = {
    type: string;
    [field: string]: unknown;
};
/** Raise it from a handler to answer with the app's own error (`"<code>: <message>"`). */
export declare class ToolError extends Error {
    readonly code: string;
    constructor(code: string, message: string);
}
/** A handler's answer; the content is serialized once, when it is made. */
export declare class Reply {
    /** The content blocks as one serialized JSON array, for a content reply. */
    readonly contentJson?: string | undefined;
    /** The app's error, for an error reply. */
    readonly error?: {
        code: string;
        message: string;
    } | undefined;
    /** The structured content as one serialized JSON object, for a structured reply. */
    readonly structuredJson?: string | undefined;
    private constructor();
    private contentBytes?;
    /** The content's bytes, encoded once per reply: a reply made ahead and answered many times
     * (`rawContent`) is never encoded again. */
    get contentBuffer(): Buffer;
    get isError(): boolean;
    /** One text block. */
    static text(text: string): Reply;
    /** One text block holding `value` as JSON (MCP has no JSON block; agents read text). */
    static json(value: unknown): Reply;
    /** One image block from raw bytes. */
    static image(data: Uint8Array, mimeType: string): Reply;
    /** Any MCP content blocks (see `content`). */
    static content(blocks: ContentBlock[]): Reply;
    /** Structured content: `value` is a JSON object, posted as `structured_content` and checked
     * by the broker against the tool's output schema; `blocks` adds content (left out, `leo-mcp`
     * gives the harness one text block of the same JSON). */
    static structured(value: Record<string, unknown>, blocks?: ContentBlock[]): Reply;
    /** Content serialized ahead of time: a JSON array of content blocks, posted as it is. */
    static rawContent(json: string): Reply;
    /** The app's own error; the agent sees `"<code>: <message>"`. */
    static error(code: string, message: string): Reply;
    /** What a handler returned, as a reply: a `Reply` as it is, a string as text, `undefined`
     * as no content, anything else as JSON text; for a tool with an output schema
     * (`structured`), anything else is structured content. */
    static from(value: unknown, structured?: boolean): Reply;
}
/** Builders of single MCP content blocks. */
export declare const content: {
    text: (text: string, extra?: Record<string, unknown>) => ContentBlock;
    image: (data: Uint8Array, mimeType: string) => ContentBlock;
    audio: (data: Uint8Array, mimeType: string) => ContentBlock;
    resourceLink: (uri: string, name: string, extra?: Record<string, unknown>) => ContentBlock;
    resource: (uri: string, body: {
        text: string;
    } | {
        blob: Uint8Array;
    }, mimeType?: string) => ContentBlock;
};
