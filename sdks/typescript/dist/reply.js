// What a handler answers: MCP content blocks for the agent, or the app's own error.
//
// The broker passes content to the agent verbatim and checks only its shape. A call's result
// is its content: there is no separate structured field on the way to the agent, so structured
// data travels as a JSON text block (`Reply.json`).
const MAX_ERROR_MESSAGE = 4096;
/** Raise it from a handler to answer with the app's own error (`"<code>: <message>"`). */
export class ToolError extends Error {
    code;
    constructor(code, message) {
        super(message);
        this.code = code;
        this.name = "ToolError";
    }
}
/** A handler's answer; the content is serialized once, when it is made. */
export class Reply {
    contentJson;
    error;
    constructor(
    /** The content blocks as one serialized JSON array, for a content reply. */
    contentJson, 
    /** The app's error, for an error reply. */
    error) {
        this.contentJson = contentJson;
        this.error = error;
    }
    get isError() {
        return this.error !== undefined;
    }
    /** One text block. */
    static text(text) {
        return new Reply(JSON.stringify([{ type: "text", text: String(text) }]));
    }
    /** One text block holding `value` as JSON (MCP has no JSON block; agents read text). */
    static json(value) {
        try {
            return Reply.text(JSON.stringify(value) ?? "null");
        }
        catch (e) {
            return Reply.error("internal", `cannot encode the result: ${e.message}`);
        }
    }
    /** One image block from raw bytes. */
    static image(data, mimeType) {
        return Reply.content([content.image(data, mimeType)]);
    }
    /** Any MCP content blocks (see `content`). */
    static content(blocks) {
        return new Reply(JSON.stringify(blocks));
    }
    /** Content serialized ahead of time: a JSON array of content blocks, posted as it is. */
    static rawContent(json) {
        return new Reply(json);
    }
    /** The app's own error; the agent sees `"<code>: <message>"`. */
    static error(code, message) {
        return new Reply(undefined, { code, message: String(message).slice(0, MAX_ERROR_MESSAGE) });
    }
    /** What a handler returned, as a reply: a `Reply` as it is, a string as text, `undefined`
     * as no content, anything else as JSON text. */
    static from(value) {
        if (value instanceof Reply)
            return value;
        if (typeof value === "string")
            return Reply.text(value);
        if (value === undefined)
            return new Reply("[]");
        return Reply.json(value);
    }
}
const b64 = (data) => Buffer.from(data).toString("base64");
/** Builders of single MCP content blocks. */
export const content = {
    text: (text, extra = {}) => ({ type: "text", text, ...extra }),
    image: (data, mimeType) => ({ type: "image", data: b64(data), mimeType }),
    audio: (data, mimeType) => ({ type: "audio", data: b64(data), mimeType }),
    resourceLink: (uri, name, extra = {}) => ({
        type: "resource_link",
        uri,
        name,
        ...extra,
    }),
    resource: (uri, body, mimeType) => {
        const resource = { uri };
        if ("text" in body)
            resource.text = body.text;
        else
            resource.blob = b64(body.blob);
        if (mimeType)
            resource.mimeType = mimeType;
        return { type: "resource", resource };
    },
};
