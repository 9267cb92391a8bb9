import { describeReplicaSeedRange } from "./replica-seed-suite.js";

describeReplicaSeedRange(451, 150);
