// What a handler answers: MCP content blocks for the agent, structured content, or the app's
// own error.
//
// The broker passes content to the agent verbatim and checks only its shape. Structured content
// (`Reply.structured`) is a JSON object the harness receives as `structuredContent`; the broker
// checks it against the tool's output schema, and `leo-mcp` adds a text block of the same JSON
// when the reply has no content, for clients that read only `content`.

/** One MCP content block. */
export type ContentBlock = { type: string; [field: string]: unknown };

const MAX_ERROR_MESSAGE = 4096;

/** Raise it from a handler to answer with the app's own error (`"<code>: <message>"`). */
export class ToolError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ToolError";
  }
}

/** A handler's answer; the content is serialized once, when it is made. */
export class Reply {
  private constructor(
    /** The content blocks as one serialized JSON array, for a content reply. */
    readonly contentJson?: string,
    /** The app's error, for an error reply. */
    readonly error?: { code: string; message: string },
    /** The structured content as one serialized JSON object, for a structured reply. */
    readonly structuredJson?: string,
  ) {}

  private contentBytes?: Buffer;

  /** The content's bytes, encoded once per reply: a reply made ahead and answered many times
   * (`rawContent`) is never encoded again. */
  get contentBuffer(): Buffer {
    this.contentBytes ??= Buffer.from(this.contentJson ?? "[]");
    return this.contentBytes;
  }

  get isError(): boolean {
    return this.error !== undefined;
  }

  /** One text block. */
  static text(text: string): Reply {
    return new Reply(JSON.stringify([{ type: "text", text: String(text) }]));
  }

  /** One text block holding `value` as JSON (MCP has no JSON block; agents read text). */
  static json(value: unknown): Reply {
    try {
      return Reply.text(JSON.stringify(value) ?? "null");
    } catch (e) {
      return Reply.error("internal", `cannot encode the result: ${(e as Error).message}`);
    }
  }

  /** One image block from raw bytes. */
  static image(data: Uint8Array, mimeType: string): Reply {
    return Reply.content([content.image(data, mimeType)]);
  }

  /** Any MCP content blocks (see `content`). */
  static content(blocks: ContentBlock[]): Reply {
    return new Reply(JSON.stringify(blocks));
  }

  /** Structured content: `value` is a JSON object, posted as `structured_content` and checked
   * by the broker against the tool's output schema; `blocks` adds content (left out, `leo-mcp`
   * gives the harness one text block of the same JSON). */
  static structured(value: Record<string, unknown>, blocks?: ContentBlock[]): Reply {
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      return Reply.error("internal", `structured content must be a JSON object, not ${Array.isArray(value) ? "an array" : typeof value}`);
    }
    try {
      return new Reply(blocks === undefined ? undefined : JSON.stringify(blocks), undefined, JSON.stringify(value));
    } catch (e) {
      return Reply.error("internal", `cannot encode the result: ${(e as Error).message}`);
    }
  }

  /** Content serialized ahead of time: a JSON array of content blocks, posted as it is. */
  static rawContent(json: string): Reply {
    return new Reply(json);
  }

  /** The app's own error; the agent sees `"<code>: <message>"`. */
  static error(code: string, message: string): Reply {
    return new Reply(undefined, { code, message: String(message).slice(0, MAX_ERROR_MESSAGE) });
  }

  /** What a handler returned, as a reply: a `Reply` as it is, a string as text, `undefined`
   * as no content, anything else as JSON text; for a tool with an output schema
   * (`structured`), anything else is structured content. */
  static from(value: unknown, structured = false): Reply {
    if (value instanceof Reply) return value;
    if (typeof value === "string") return Reply.text(value);
    if (value === undefined) return new Reply("[]");
    if (structured) return Reply.structured(value as Record<string, unknown>);
    return Reply.json(value);
  }
}

const b64 = (data: Uint8Array) => Buffer.from(data).toString("base64");

/** Builders of single MCP content blocks. */
export const content = {
  text: (text: string, extra: Record<string, unknown> = {}): ContentBlock => ({ type: "text", text, ...extra }),
  image: (data: Uint8Array, mimeType: string): ContentBlock => ({ type: "image", data: b64(data), mimeType }),
  audio: (data: Uint8Array, mimeType: string): ContentBlock => ({ type: "audio", data: b64(data), mimeType }),
  resourceLink: (uri: string, name: string, extra: Record<string, unknown> = {}): ContentBlock => ({
    type: "resource_link",
    uri,
    name,
    ...extra,
  }),
  resource: (uri: string, body: { text: string } | { blob: Uint8Array }, mimeType?: string): ContentBlock => {
    const resource: Record<string, unknown> = { uri };
    if ("text" in body) resource.text = body.text;
    else resource.blob = b64(body.blob);
    if (mimeType) resource.mimeType = mimeType;
    return { type: "resource", resource };
  },
};
