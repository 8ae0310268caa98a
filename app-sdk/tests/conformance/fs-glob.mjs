// Node's `fs` with the `glob` package's `globSync`, for the conformance CLI on Node 20.
import fs from "node:fs";
export * from "node:fs";
export { globSync } from "glob";
export default fs;
