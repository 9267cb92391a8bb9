import { describeSeedRange } from "./seed-suite.js";

describeSeedRange(1, 1500);
