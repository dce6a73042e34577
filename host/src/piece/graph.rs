//! A piece drawn as a graph: its movements, where its rules and `default_next` lead, the ends
//! and parks the piece itself names, and the movement a job stands in.
//!
//! Invariant: pure. The graph is a function of the piece alone: a node per movement (with the
//! tools it offers), the piece's intake, `COMPLETE` / `ABORT` where a `default_next` or the
//! `complete` tool leads, and a park node for each wait the piece declares (`WAIT_SUBTASKS`
//! rules, `approve` gates, `workers`), with the edge back to where the job resumes. Every label
//! is escaped for the format it is written in.

use std::fmt::Write as _;

use super::model::{DefaultNext, Located, Next, Piece, Sentinel};

/// The tool whose outcome ends the piece (DESIGN: `terminal.complete`).
const COMPLETE_TOOL: &str = "complete";
/// Rule conditions are shown up to this many characters.
const LABEL_CHARS: usize = 48;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    /// The piece's intake, filled in before the first movement.
    Intake,
    Movement {
        initial: bool,
    },
    /// Where the job ends.
    End(Sentinel),
    /// Where the job waits, and for what.
    Park(Sentinel),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Unique in the graph; safe in every format (letters, digits, `_`).
    pub id: String,
    pub label: String,
    /// For a movement, the tools it offers.
    pub detail: Option<String>,
    pub kind: NodeKind,
    /// The movement's name, for a movement node.
    pub movement: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    /// A rule the model may take, labelled with its condition.
    Rule,
    /// Where the movement goes when no rule fires.
    Default,
    /// Into a park, or out of it to where the job resumes.
    Park,
    /// The `complete` tool ending the piece.
    Tool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub label: Option<String>,
    pub kind: EdgeKind,
}

/// See the module's invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PieceGraph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

impl PieceGraph {
    pub fn of(piece: &Piece) -> Self {
        let mut graph = Self {
            name: piece.name.value.clone(),
            nodes: Vec::new(),
            edges: Vec::new(),
        };
        let movement_id = |name: &str| {
            piece
                .movements
                .iter()
                .position(|movement| movement.name.value == name)
                .map(|index| format!("m{index}"))
        };
        if piece.intake.is_some() {
            graph.node("intake", "intake", None, NodeKind::Intake, None);
            if let Some(initial) = movement_id(&piece.initial_movement.value) {
                graph.edge("intake", &initial, Some("filled in"), EdgeKind::Park);
            }
        }
        for (index, movement) in piece.movements.iter().enumerate() {
            let name = &movement.name.value;
            let detail = (!movement.tools.is_empty()).then(|| names(&movement.tools));
            let initial = *name == piece.initial_movement.value;
            let id = format!("m{index}");
            graph.node(
                &id,
                name,
                detail,
                NodeKind::Movement { initial },
                Some(name),
            );
        }
        for (index, movement) in piece.movements.iter().enumerate() {
            let id = format!("m{index}");
            let resumes_at = match movement.default_target() {
                Some(Ok(DefaultNext::Movement(next))) => movement_id(&next),
                Some(Ok(DefaultNext::Complete)) => Some(graph.end(Sentinel::Complete)),
                Some(Ok(DefaultNext::Abort)) => Some(graph.end(Sentinel::Abort)),
                _ => None,
            };
            for rule in &movement.rules {
                let condition = Some(shorten(&rule.condition.value));
                match rule.target() {
                    Ok(Next::Movement(next)) => {
                        if let Some(to) = movement_id(&next) {
                            graph.edge(&id, &to, condition.as_deref(), EdgeKind::Rule);
                        }
                    }
                    Ok(Next::WaitSubtasks) => {
                        let park = format!("{id}_subtasks");
                        graph.node(
                            &park,
                            Sentinel::WaitSubtasks.as_str(),
                            None,
                            NodeKind::Park(Sentinel::WaitSubtasks),
                            None,
                        );
                        graph.edge(&id, &park, condition.as_deref(), EdgeKind::Rule);
                        let back = resumes_at.clone().unwrap_or_else(|| id.clone());
                        graph.edge(&park, &back, Some("subtasks done"), EdgeKind::Park);
                    }
                    Err(_) => {}
                }
            }
            if let Some(next) = &resumes_at {
                graph.edge(&id, next, Some("otherwise"), EdgeKind::Default);
            }
            if !movement.approve.is_empty() {
                let detail = format!("approve {}", names(&movement.approve));
                let sentinel = Sentinel::WaitingHumanToolRequest;
                graph.round_trip(
                    &id,
                    "approve",
                    sentinel,
                    detail,
                    "asks",
                    "approved or denied",
                );
            }
            if !movement.workers.is_empty() {
                let detail = format!("worker {}", names(&movement.workers));
                let (asks, back) = ("worker asks or hands in", "answered");
                graph.round_trip(
                    &id,
                    "worker",
                    Sentinel::WaitingHumanWorker,
                    detail,
                    asks,
                    back,
                );
            }
            if movement
                .tools
                .iter()
                .any(|tool| tool.value == COMPLETE_TOOL)
            {
                let end = graph.end(Sentinel::Complete);
                graph.edge(&id, &end, Some(COMPLETE_TOOL), EdgeKind::Tool);
            }
        }
        graph
    }

    fn node(
        &mut self,
        id: &str,
        label: &str,
        detail: Option<String>,
        kind: NodeKind,
        movement: Option<&str>,
    ) {
        self.nodes.push(Node {
            id: id.to_owned(),
            label: label.to_owned(),
            detail,
            kind,
            movement: movement.map(str::to_owned),
        });
    }

    /// A park the movement `from` enters (`asks`) and comes back from (`back`).
    fn round_trip(
        &mut self,
        from: &str,
        suffix: &str,
        sentinel: Sentinel,
        detail: String,
        asks: &str,
        back: &str,
    ) {
        let park = format!("{from}_{suffix}");
        let kind = NodeKind::Park(sentinel);
        self.node(&park, sentinel.as_str(), Some(detail), kind, None);
        self.edge(from, &park, Some(asks), EdgeKind::Park);
        self.edge(&park, from, Some(back), EdgeKind::Park);
    }

    /// The end node of `sentinel`, added once.
    fn end(&mut self, sentinel: Sentinel) -> String {
        let id = sentinel.as_str().to_lowercase();
        if !self.nodes.iter().any(|node| node.id == id) {
            self.node(&id, sentinel.as_str(), None, NodeKind::End(sentinel), None);
        }
        id
    }

    fn edge(&mut self, from: &str, to: &str, label: Option<&str>, kind: EdgeKind) {
        let edge = Edge {
            from: from.to_owned(),
            to: to.to_owned(),
            label: label.map(str::to_owned),
            kind,
        };
        if !self.edges.contains(&edge) {
            self.edges.push(edge);
        }
    }

    /// Whether `node` is the movement `current`.
    fn is_current(node: &Node, current: Option<&str>) -> bool {
        current.is_some() && node.movement.as_deref() == current
    }

    /// Mermaid flowchart text; `current` marks the movement a job stands in.
    pub fn mermaid(&self, current: Option<&str>) -> String {
        let text = |raw: &str| {
            raw.replace('"', "#quot;")
                .replace('<', "#lt;")
                .replace('>', "#gt;")
        };
        let mut out = String::from("flowchart TD\n");
        for node in &self.nodes {
            let label = match &node.detail {
                Some(detail) => {
                    format!("{}<br/><small>{}</small>", text(&node.label), text(detail))
                }
                None => text(&node.label),
            };
            let (open, close) = match node.kind {
                NodeKind::Intake => ("[/\"", "\"/]"),
                NodeKind::Movement { .. } => ("[\"", "\"]"),
                NodeKind::End(_) => ("((\"", "\"))"),
                NodeKind::Park(_) => ("{{\"", "\"}}"),
            };
            let _ = writeln!(out, "  {}{open}{label}{close}", node.id);
        }
        for edge in &self.edges {
            let arrow = match edge.kind {
                EdgeKind::Default | EdgeKind::Park => "-.->",
                EdgeKind::Rule | EdgeKind::Tool => "-->",
            };
            match &edge.label {
                Some(label) => {
                    let _ = writeln!(
                        out,
                        "  {} {arrow}|\"{}\"| {}",
                        edge.from,
                        text(label),
                        edge.to
                    );
                }
                None => {
                    let _ = writeln!(out, "  {} {arrow} {}", edge.from, edge.to);
                }
            }
        }
        if let Some(node) = self
            .nodes
            .iter()
            .find(|node| Self::is_current(node, current))
        {
            out.push_str("  classDef current fill:#fde68a,stroke:#b45309,stroke-width:3px\n");
            let _ = writeln!(out, "  class {} current", node.id);
        }
        out
    }

    /// An SVG picture, laid out top to bottom; `current` marks the movement a job stands in.
    /// Each node's shape is a `<g id="node-ID" class="node KIND" data-movement="NAME">` (the
    /// movement's name only on movements; `current` joins the class), followed by its label.
    pub fn svg(&self, current: Option<&str>) -> String {
        use layout::backends::svg::SVGWriter;
        use layout::core::base::Orientation;
        use layout::core::color::Color;
        use layout::core::geometry::Point;
        use layout::core::style::{LineStyleKind, StyleAttr};
        use layout::std_shapes::render::get_shape_size;
        use layout::std_shapes::shapes::{Arrow, Element, LineEndKind, ShapeKind};
        use layout::topo::layout::VisualGraph;

        // One font size for nodes and edges: the writer lists its sizes in hash order.
        const FONT: usize = 13;
        let mut graph = VisualGraph::new(Orientation::TopToBottom);
        let mut handles = std::collections::HashMap::new();
        for node in &self.nodes {
            let label = match &node.detail {
                Some(detail) => format!("{}\n{detail}", node.label),
                None => node.label.clone(),
            };
            let is_current = Self::is_current(node, current);
            let (shape, fill, rounded, kind) = match node.kind {
                NodeKind::Intake => (ShapeKind::new_box(&label), "#ede9fe", 0, "intake"),
                NodeKind::Movement { .. } => (ShapeKind::new_box(&label), "#f8fafc", 8, "movement"),
                NodeKind::End(_) => (ShapeKind::new_double_circle(&label), "#e2e8f0", 0, "end"),
                NodeKind::Park(_) => (ShapeKind::new_box(&label), "#e0f2fe", 0, "park"),
            };
            let (fill, line, width) = match is_current {
                true => ("#fde68a", "#b45309", 3),
                false => (fill, "#334155", 1),
            };
            let look = StyleAttr::new(
                Color::fast(line),
                width,
                Some(Color::fast(fill)),
                rounded,
                FONT,
            );
            let round = matches!(node.kind, NodeKind::End(_));
            let direction = Orientation::TopToBottom.flip();
            let mut size = get_shape_size(direction, &shape, FONT, round);
            if !round {
                size = size.add(Point::new(16.0, 12.0));
            }
            let mut properties = format!(
                "id=\"node-{}\" class=\"node {kind}{}\"",
                node.id,
                if is_current { " current" } else { "" }
            );
            if let Some(movement) = &node.movement {
                let _ = write!(properties, " data-movement=\"{}\"", xml_attribute(movement));
            }
            let element = Element::create_with_properties(shape, look, direction, size, properties);
            handles.insert(node.id.as_str(), graph.add_node(element));
        }
        if handles.is_empty() {
            return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"0\" height=\"0\"/>\n"
                .to_owned();
        }
        for edge in &self.edges {
            let (Some(from), Some(to)) = (
                handles.get(edge.from.as_str()),
                handles.get(edge.to.as_str()),
            ) else {
                continue;
            };
            let look = StyleAttr::new(Color::fast("#475569"), 1, None, 0, FONT);
            let line = match edge.kind {
                EdgeKind::Default | EdgeKind::Park => LineStyleKind::Dashed,
                EdgeKind::Rule | EdgeKind::Tool => LineStyleKind::Normal,
            };
            let kind = match edge.kind {
                EdgeKind::Rule => "rule",
                EdgeKind::Default => "default",
                EdgeKind::Park => "park",
                EdgeKind::Tool => "tool",
            };
            let arrow = Arrow::with_properties(
                LineEndKind::None,
                LineEndKind::Arrow,
                line,
                edge.label.as_deref().unwrap_or(""),
                &look,
                format!("class=\"edge {kind}\""),
                &None,
                &None,
            );
            graph.add_edge(arrow, *from, *to);
        }
        let mut writer = SVGWriter::new();
        graph.do_it(false, false, false, &mut writer);
        writer.finalize()
    }

    /// Graphviz DOT text; `current` marks the movement a job stands in.
    pub fn dot(&self, current: Option<&str>) -> String {
        let text = |raw: &str| {
            raw.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        };
        let mut out = format!("digraph \"{}\" {{\n", text(&self.name));
        out.push_str("  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f8fafc\", fontname=\"sans-serif\"];\n");
        out.push_str("  edge [fontname=\"sans-serif\", fontsize=10];\n");
        for node in &self.nodes {
            let label = match &node.detail {
                Some(detail) => format!("{}\\n{}", text(&node.label), text(detail)),
                None => text(&node.label),
            };
            let mut attributes = format!("label=\"{label}\"");
            match node.kind {
                NodeKind::Intake => attributes.push_str(", shape=parallelogram"),
                NodeKind::Movement { initial: true } => attributes.push_str(", penwidth=2"),
                NodeKind::Movement { initial: false } => {}
                NodeKind::End(_) => {
                    attributes.push_str(", shape=doublecircle, fillcolor=\"#e2e8f0\"")
                }
                NodeKind::Park(_) => attributes.push_str(", shape=hexagon, fillcolor=\"#e0f2fe\""),
            }
            if Self::is_current(node, current) {
                attributes.push_str(", fillcolor=\"#fde68a\", color=\"#b45309\", penwidth=3");
            }
            let _ = writeln!(out, "  {} [{attributes}];", node.id);
        }
        for edge in &self.edges {
            let mut attributes = Vec::new();
            if let Some(label) = &edge.label {
                attributes.push(format!("label=\"{}\"", text(label)));
            }
            if matches!(edge.kind, EdgeKind::Default | EdgeKind::Park) {
                attributes.push("style=dashed".to_owned());
            }
            let _ = writeln!(
                out,
                "  {} -> {} [{}];",
                edge.from,
                edge.to,
                attributes.join(", ")
            );
        }
        out.push_str("}\n");
        out
    }
}

/// The names of a list of the piece, comma-separated.
fn names(list: &[Located<String>]) -> String {
    let names: Vec<&str> = list.iter().map(|name| name.value.as_str()).collect();
    names.join(", ")
}

/// `text` escaped for an XML attribute value in double quotes.
fn xml_attribute(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `text` on one line, cut at [`LABEL_CHARS`] characters.
fn shorten(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(LABEL_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}
