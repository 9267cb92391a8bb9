import { h } from "../dom.js";
import { openClusterForm } from "./cluster-tabs.js";
import type { Page } from "./page.js";

/** The first page after signing in: who is signed in and what its scopes allow. */
export const overviewPage: Page = {
  path: "",
  title: "Overview",
  visible: () => true,
  render({ session, navigate }) {
    const apis = [
      session.canCall("admin") ? "the Administration API" : null,
      session.canCall("modeler") ? "the Modeler API" : null,
    ].filter((api) => api !== null);
    return h(
      "section",
      {},
      h("p", {}, `This client may call ${apis.join(" and ")}.`),
      h("h2", {}, "Scopes"),
      h(
        "ul",
        { class: "scopes" },
        session.scopes().map((scope) => h("li", {}, h("code", {}, scope))),
      ),
      openClusterForm(session, navigate),
    );
  },
};
