import { describeSeedRange } from "./seed-suite.js";

describeSeedRange(2401, 1200);
