import { describeSeedRange } from "./seed-suite.js";

describeSeedRange(1201, 1200);
