// A job's dataflow: its JobGraph laid out left to right by dagre, each
// vertex with its state and subtask counts, each edge with its
// distribution and whether its results are pipelined (solid) or blocking
// (dashed).

import dagre from "@dagrejs/dagre";
import { DistributionPattern, type JobGraph, ResultPartitionType } from "../gen/jobplane/v1/job_graph_pb.js";
import type { VertexDetails } from "../gen/jobplane/v1/job_pb.js";
import { stateName } from "./api.js";

const nodeWidth = 190;
const nodeHeight = 64;

/** The subtask counts of v by state, as "2 running, 1 finished". */
function counts(v: VertexDetails | undefined): string {
  if (v === undefined) return "";
  return v.taskCounts.filter((c) => c.count > 0).map((c) => `${c.count} ${stateName(c.state).toLowerCase()}`).join(", ");
}

function distribution(d: DistributionPattern): string {
  return d === DistributionPattern.POINTWISE ? "pointwise" : d === DistributionPattern.ALL_TO_ALL ? "all-to-all" : "";
}

/** What fits of s in n characters. */
function clip(s: string, n: number): string {
  return s.length <= n ? s : s.slice(0, n - 1) + "…";
}

export function Dataflow({ graph, vertices }: { graph: JobGraph; vertices: VertexDetails[] }) {
  const byId = new Map(vertices.map((v) => [v.vertexId, v]));
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: "LR", nodesep: 24, ranksep: 70, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const v of graph.vertices) g.setNode(v.id, { width: nodeWidth, height: nodeHeight });
  graph.edges.forEach((e, i) => {
    if (g.hasNode(e.sourceVertexId) && g.hasNode(e.targetVertexId)) {
      g.setEdge(e.sourceVertexId, e.targetVertexId, { width: 70, height: 14, labelpos: "c" }, String(i));
    }
  });
  dagre.layout(g);
  const size = g.graph();
  const width = Math.ceil(size.width ?? 0);
  const height = Math.ceil(size.height ?? 0);
  return (
    <figure class="dataflow">
      <svg
        role="img"
        aria-label={`Dataflow of ${graph.vertices.length} vertices and ${graph.edges.length} edges`}
        viewBox={`0 0 ${width} ${height}`}
        width={width}
        height={height}
      >
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
            <path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead" />
          </marker>
        </defs>
        {graph.edges.map((e, i) => {
          const l = g.edge(e.sourceVertexId, e.targetVertexId, String(i));
          if (l?.points === undefined) return null;
          const d = l.points.map((p: { x: number; y: number }, j: number) => `${j === 0 ? "M" : "L"} ${p.x} ${p.y}`).join(" ");
          const blocking = e.resultType === ResultPartitionType.BLOCKING;
          return (
            <g class={`edge ${blocking ? "blocking" : "pipelined"}`} data-edge={`${e.sourceVertexId}->${e.targetVertexId}`}>
              <title>{`${e.sourceVertexId} → ${e.targetVertexId}: ${distribution(e.distribution)}, ${blocking ? "blocking" : "pipelined"}`}</title>
              <path d={d} marker-end="url(#arrow)" />
              {l.x !== undefined && l.y !== undefined && (
                <text x={l.x} y={l.y - 5} text-anchor="middle">{distribution(e.distribution)}</text>
              )}
            </g>
          );
        })}
        {graph.vertices.map((v) => {
          const n = g.node(v.id);
          const details = byId.get(v.id);
          const state = details !== undefined ? stateName(details.state).toLowerCase() : "created";
          return (
            <g class={`vertex ${state}`} data-vertex={v.id} transform={`translate(${n.x - nodeWidth / 2}, ${n.y - nodeHeight / 2})`}>
              <title>{`${v.name} (${v.id}): ${state}, parallelism ${details?.parallelism ?? v.parallelism}`}</title>
              <rect width={nodeWidth} height={nodeHeight} rx="6" />
              <text x="10" y="20" class="name">{clip(v.name || v.id, 24)}</text>
              <text x="10" y="38">{`${state.toUpperCase()} · ×${details?.parallelism ?? v.parallelism}`}</text>
              <text x="10" y="55" class="counts">{clip(counts(details), 30)}</text>
            </g>
          );
        })}
      </svg>
      <figcaption class="hint">Solid edges are pipelined, dashed ones blocking.</figcaption>
    </figure>
  );
}
