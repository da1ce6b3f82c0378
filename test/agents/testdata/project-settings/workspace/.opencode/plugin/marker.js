// A plugin of the fixture's: OpenCode loads a project's plugins at its start.
import { appendFileSync } from "node:fs";

export const Marker = async ({ directory }) => {
  appendFileSync(`${directory}/hooked.txt`, "opencode-plugin\n");
  return {};
};
