import { describeReplicaSeedRange } from "./replica-seed-suite.js";

describeReplicaSeedRange(151, 150);
