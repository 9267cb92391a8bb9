import { describeReplicaSeedRange } from "./replica-seed-suite.js";

describeReplicaSeedRange(301, 300);
