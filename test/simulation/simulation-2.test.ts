import { describeSeedRange } from "./seed-suite.js";

describeSeedRange(1501, 1500);
