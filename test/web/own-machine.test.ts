/**
 * The console sends a cluster's gateway token to a loopback address only from a page loaded from one: from another
 * machine, that address is the viewer's own machine, where whatever listens at the port would receive the token.
 */
import { describe, expect, it } from "vitest";
import { isOwnMachineHost, mayCarryToken } from "../../web/src/own-machine.js";

describe("the browser's own machine", () => {
  it("recognizes IPv4 loopback, the whole of 127.0.0.0/8, in every form the URL parser reads", () => {
    for (const host of [
      "127.0.0.1",
      "127.0.0.2",
      "127.255.255.254",
      "127.1",
      "0x7f.0.0.1",
      "2130706433",
      "127.000.0.1",
    ]) {
      expect(isOwnMachineHost(host), host).toBe(true);
    }
  });

  it("recognizes IPv6 loopback, bracketed or not, in long form and mapped from IPv4", () => {
    for (const host of ["::1", "[::1]", "0:0:0:0:0:0:0:1", "[0000::0001]", "::ffff:127.0.0.1", "[::FFFF:7F00:1]"]) {
      expect(isOwnMachineHost(host), host).toBe(true);
    }
  });

  it("recognizes localhost and names below it, in any case and with the root's dot", () => {
    for (const host of ["localhost", "LOCALHOST", "LocalHost", "localhost.", "console.localhost", "A.LOCALHOST"]) {
      expect(isOwnMachineHost(host), host).toBe(true);
    }
  });

  it("takes the unspecified addresses as this machine, where browsers that still connect to them connect", () => {
    for (const host of ["0.0.0.0", "::", "[::]", "0"]) expect(isOwnMachineHost(host), host).toBe(true);
  });

  it("does not take other hosts for this machine, including names that only look like loopback", () => {
    for (const host of [
      "10.0.0.5",
      "192.168.1.20",
      "128.0.0.1",
      "126.255.255.255",
      "::2",
      "[fd00::1]",
      "::ffff:10.0.0.1",
      "flowplane.example.com",
      "localhost.example.com",
      "notlocalhost",
      "127.0.0.1.example.com",
      "FLOWPLANE.EXAMPLE.COM",
      "",
      "not a host",
    ]) {
      expect(isOwnMachineHost(host), host).toBe(false);
    }
  });
});

describe("which URLs the console may send a token to", () => {
  const loopbackPages = [
    "http://127.0.0.1:8088/console/clusters/abc",
    "http://localhost:8088/console/",
    "http://LOCALHOST:8088/console/",
    "http://[::1]:8088/console/",
    "http://127.0.0.5:8088/console/",
  ];
  const remotePages = [
    "https://flowplane.example.com/console/clusters/abc",
    "http://10.0.0.5:8088/console/",
    "http://[fd00::5]:8088/console/",
    "https://FLOWPLANE.example.com/console/",
  ];
  const loopbackTargets = [
    "http://127.0.0.1:26500/v2/topology",
    "http://127.9.8.7:9600/actuator/cluster",
    "http://localhost:26500/v2/topology",
    "http://[::1]:26500/v2/topology",
    "http://[0:0:0:0:0:0:0:1]:26500/v2/topology",
    "HTTP://LOCALHOST:26500/v2/topology",
  ];
  const remoteTargets = ["https://gateway.example.com/v2/topology", "http://10.0.0.7:26500/v2/topology"];

  it("sends it to a loopback address from a page loaded from one", () => {
    for (const page of loopbackPages) {
      for (const target of loopbackTargets) expect(mayCarryToken(target, page), `${page} → ${target}`).toBe(true);
    }
  });

  it("never sends it to a loopback address from a page loaded from another machine", () => {
    for (const page of remotePages) {
      for (const target of loopbackTargets) expect(mayCarryToken(target, page), `${page} → ${target}`).toBe(false);
    }
  });

  it("sends it to other hosts and to the page's own origin from any page", () => {
    for (const page of [...loopbackPages, ...remotePages]) {
      for (const target of [...remoteTargets, "/admin/clusters", "/modeler/api/v1/projects/search"]) {
        expect(mayCarryToken(target, page), `${page} → ${target}`).toBe(true);
      }
    }
  });
});
