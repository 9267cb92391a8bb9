import { describeSeedRange } from "./seed-suite.js";

describeSeedRange(3001, 1500);
