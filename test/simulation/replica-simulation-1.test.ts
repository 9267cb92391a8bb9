import { describeReplicaSeedRange } from "./replica-seed-suite.js";

describeReplicaSeedRange(1, 300);
