#!/usr/bin/env node
// Launcher of the built command line (npm run build writes dist/); all logic lives in src/cli/main.ts.
import { main } from "../dist/cli/main.js";

await main();
