//! The drawing of the example pieces and of pieces that try to break the formats.

use super::graph::{EdgeKind, NodeKind, PieceGraph};
use super::{Sentinel, parse_piece};

const RESEARCH: &str = include_str!("../../../pieces/research.yaml");
const COMMISSION: &str = include_str!("../../../pieces/commission.yaml");

fn graph(text: &str) -> PieceGraph {
    PieceGraph::of(&parse_piece(text, "piece.yaml").unwrap())
}

/// `(from label, to label, edge label)` of every edge.
fn edges(graph: &PieceGraph) -> Vec<(String, String, Option<String>, EdgeKind)> {
    let label = |id: &str| {
        let node = graph.nodes.iter().find(|node| node.id == id).unwrap();
        node.label.clone()
    };
    graph
        .edges
        .iter()
        .map(|edge| {
            (
                label(&edge.from),
                label(&edge.to),
                edge.label.clone(),
                edge.kind,
            )
        })
        .collect()
}

fn has(graph: &PieceGraph, from: &str, to: &str, label: &str, kind: EdgeKind) -> bool {
    edges(graph).contains(&(from.to_owned(), to.to_owned(), Some(label.to_owned()), kind))
}

#[test]
fn rules_defaults_subtask_waits_and_the_end_of_research_are_drawn() {
    let research = graph(RESEARCH);
    let movements: Vec<&str> = research
        .nodes
        .iter()
        .filter(|node| matches!(node.kind, NodeKind::Movement { .. }))
        .map(|node| node.label.as_str())
        .collect();
    assert_eq!(movements, ["plan", "gather", "write"]);
    assert!(matches!(
        research.nodes[0].kind,
        NodeKind::Movement { initial: true }
    ));
    assert!(has(
        &research,
        "plan",
        "gather",
        "The plan is ready.",
        EdgeKind::Rule
    ));
    assert!(has(
        &research,
        "plan",
        "gather",
        "otherwise",
        EdgeKind::Default
    ));
    // A WAIT_SUBTASKS rule parks, and the job resumes at default_next.
    let condition = "Sub-questions were delegated to subtasks that ar…";
    assert!(has(
        &research,
        "gather",
        "WAIT_SUBTASKS",
        condition,
        EdgeKind::Rule
    ));
    assert!(has(
        &research,
        "WAIT_SUBTASKS",
        "write",
        "subtasks done",
        EdgeKind::Park
    ));
    assert!(has(
        &research,
        "write",
        "COMPLETE",
        "otherwise",
        EdgeKind::Default
    ));
    assert!(has(
        &research,
        "write",
        "COMPLETE",
        "complete",
        EdgeKind::Tool
    ));
    let ends = research
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::End(Sentinel::Complete));
    assert_eq!(
        ends.count(),
        1,
        "one end node, however many edges lead there"
    );
}

#[test]
fn intake_approval_gates_and_workers_park_and_come_back() {
    let commission = graph(COMMISSION);
    assert!(has(
        &commission,
        "intake",
        "commission",
        "filled in",
        EdgeKind::Park
    ));
    let gate = commission
        .nodes
        .iter()
        .find(|node| node.kind == NodeKind::Park(Sentinel::WaitingHumanToolRequest))
        .expect("the approval gate");
    assert_eq!(gate.detail.as_deref(), Some("approve RunWorker"));
    assert!(has(
        &commission,
        "commission",
        "WAITING_HUMAN_TOOL_REQUEST",
        "asks",
        EdgeKind::Park
    ));
    let back = "approved or denied";
    assert!(has(
        &commission,
        "WAITING_HUMAN_TOOL_REQUEST",
        "commission",
        back,
        EdgeKind::Park
    ));
    assert!(has(
        &commission,
        "WAITING_HUMAN_WORKER",
        "commission",
        "answered",
        EdgeKind::Park
    ));
}

#[test]
fn the_current_movement_is_marked_in_each_format() {
    let research = graph(RESEARCH);
    let mermaid = research.mermaid(Some("gather"));
    assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
    assert!(mermaid.contains("  class m1 current\n"), "{mermaid}");
    assert!(
        mermaid.contains("  m0 -->|\"The plan is ready.\"| m1\n"),
        "{mermaid}"
    );
    assert!(!research.mermaid(None).contains("class "));
    let dot = research.dot(Some("gather"));
    assert!(dot.starts_with("digraph \"research\" {"), "{dot}");
    let current = dot
        .lines()
        .find(|line| line.trim_start().starts_with("m1 "))
        .unwrap();
    assert!(current.contains("fillcolor=\"#fde68a\""), "{current}");
    assert!(!research.dot(Some("nowhere")).contains("#fde68a"));
}

#[test]
fn labels_cannot_break_out_of_their_format() {
    let piece = r#"
name: tricky
initial_movement: a
max_movements: 3
movements:
  - name: a
    instructions: x
    rules:
      - condition: 'say "hi" <b> \ then go'
        next: b
  - name: b
    instructions: y
    default_next: COMPLETE
"#;
    let tricky = graph(piece);
    let dot = tricky.dot(None);
    assert!(
        dot.contains(r#"label="say \"hi\" <b> \\ then go""#),
        "{dot}"
    );
    let mermaid = tricky.mermaid(None);
    assert!(
        mermaid.contains("|\"say #quot;hi#quot; #lt;b#gt; \\ then go\"|"),
        "{mermaid}"
    );
}

#[test]
fn the_svg_names_each_node_and_escapes_what_it_draws() {
    let svg = graph(RESEARCH).svg(Some("gather"));
    assert!(
        svg.contains("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(
        svg.contains(r#"id="node-m1" class="node movement current" data-movement="gather""#),
        "{svg}"
    );
    assert!(svg.contains(r#"id="node-m0" class="node movement" data-movement="plan""#));
    assert!(
        svg.contains(r#"id="node-complete" class="node end""#),
        "{svg}"
    );
    assert!(
        svg.contains(">The plan is ready.<"),
        "edge labels are drawn: {svg}"
    );

    let piece = r#"
name: tricky
initial_movement: 'a"<b>'
max_movements: 3
movements:
  - name: 'a"<b>'
    instructions: x
    default_next: COMPLETE
"#;
    let svg = graph(piece).svg(Some("a\"<b>"));
    assert!(svg.contains(r#"data-movement="a&quot;&lt;b&gt;""#), "{svg}");
    assert!(!svg.contains("<b>"), "{svg}");
}
