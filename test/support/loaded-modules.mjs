// Loaded with `--import` into a child process: writes the URL of every module the child loads through the ES module
// loader to its standard error, one per line after LOADED_MODULE_PREFIX, so that a test can tell what a command loads.
import { register } from "node:module";

const hooks = `
export async function load(url, context, nextLoad) {
  console.error("flowplane-loaded-module " + url);
  return nextLoad(url, context);
}
`;

register(`data:text/javascript,${encodeURIComponent(hooks)}`);
