/**
 * Colours of a BPMN file's drawing that are not plain colours are removed before the viewer paints them, whatever
 * prefix the file binds the colour extensions to; plain colours stay. Checked on files read by the viewer's own model
 * library.
 */
import { BpmnModdle } from "bpmn-moddle";
import { describe, expect, it } from "vitest";
import { type DiagramDefinitions, isPlainColour, removeUnsafeColours } from "../../../web/src/pages/diagram-colours.js";

const namespaces =
  'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:bpmndi="http://www.omg.org/spec/BPMN/20100524/DI" ' +
  'xmlns:dc="http://www.omg.org/spec/DD/20100524/DC" xmlns:bioc="http://bpmn.io/schema/bpmn/biocolor/1.0" ' +
  'xmlns:hue="http://bpmn.io/schema/bpmn/biocolor/1.0" xmlns:color="http://www.omg.org/spec/BPMN/non-normative/color/1.0"';

const file = `<bpmn:definitions ${namespaces} id="d" targetNamespace="http://example.com">
  <bpmn:process id="p"><bpmn:task id="a" name="A" /><bpmn:task id="b" name="B" /><bpmn:sequenceFlow id="f" sourceRef="a" targetRef="b" /></bpmn:process>
  <bpmndi:BPMNDiagram id="diagram"><bpmndi:BPMNPlane id="plane" bpmnElement="p">
    <bpmndi:BPMNShape id="a_di" bpmnElement="a" bioc:fill="#bbdefb" bioc:stroke="url(https://tracker.example/1)" color:background-color="rgb(187, 222, 251)" color:border-color="var(--x)">
      <dc:Bounds x="0" y="0" width="100" height="80" />
      <bpmndi:BPMNLabel color:color="url(#gradient)"><dc:Bounds x="0" y="90" width="100" height="20" /></bpmndi:BPMNLabel>
    </bpmndi:BPMNShape>
    <bpmndi:BPMNShape id="b_di" bpmnElement="b" hue:fill="url(https://tracker.example/2)" hue:stroke="DarkBlue"><dc:Bounds x="200" y="0" width="100" height="80" /></bpmndi:BPMNShape>
    <bpmndi:BPMNEdge id="f_di" bpmnElement="f" bioc:stroke="red;fill:url(https://tracker.example/3)" />
  </bpmndi:BPMNPlane></bpmndi:BPMNDiagram>
</bpmn:definitions>`;

interface Element {
  id: string;
  get(name: string): unknown;
  label?: { get(name: string): unknown };
}

describe("a diagram's colours", () => {
  it("tells plain colours from values that could name a resource", () => {
    for (const plain of [
      "red",
      "DarkBlue",
      "#fff",
      "#bbdefb",
      "#bbdefb80",
      "rgb(1, 2, 3)",
      "rgba(1,2,3,0.5)",
      "hsl(120 50% 50% / 0.5)",
    ]) {
      expect(isPlainColour(plain), plain).toBe(true);
    }
    for (const unsafe of [
      "url(https://a.example/x)",
      "url(#g)",
      "var(--x)",
      "red;fill:url(x)",
      "rgb(url(x))",
      "",
      "#ff",
      7,
      null,
    ]) {
      expect(isPlainColour(unsafe), String(unsafe)).toBe(false);
    }
  });

  it("removes every colour that is not plain, under any prefix, from shapes, edges and labels", async () => {
    const { rootElement } = await BpmnModdle().fromXML(file, "bpmn:Definitions");
    const definitions = rootElement as unknown as DiagramDefinitions & {
      diagrams: { plane: { planeElement: Element[] } }[];
    };
    expect(removeUnsafeColours(definitions)).toBe(5);
    const [a, b, flow] = definitions.diagrams[0]?.plane.planeElement ?? [];
    const colours = (element: Element | Element["label"] | undefined) =>
      ["bioc:fill", "bioc:stroke", "color:background-color", "color:border-color", "color:color"].map((name) =>
        element?.get(name),
      );
    expect(colours(a)).toEqual(["#bbdefb", undefined, "rgb(187, 222, 251)", undefined, undefined]);
    expect(colours(a?.label)).toEqual([undefined, undefined, undefined, undefined, undefined]);
    expect(colours(b)).toEqual([undefined, "DarkBlue", undefined, undefined, undefined]);
    expect(colours(flow)).toEqual([undefined, undefined, undefined, undefined, undefined]);
    // Nothing is left to remove the second time.
    expect(removeUnsafeColours(definitions)).toBe(0);
  });
});
