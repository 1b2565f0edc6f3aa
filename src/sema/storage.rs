//! Declarations for tiled storage: range tilings (`tile 40`, `spin(100, 100)`,
//! `irreps(…)`), pair symmetry of tensors (`symmetric((p q)(r s))`) and block rules
//! (`spin(a b | i j)`, `irrep(p q r s)`, `tiles[[0,1], …]`). Errors E0405–E0418.

use super::decls::{int_text, int_value, too_large, IntVal};
use super::hir::{self, RangeId};
use super::Ctx;
use crate::diag::Diagnostic;
use crate::symmetry::PermGroup;
use crate::syntax::{ast, Span};

/// The most dimensions of a tensor with pair symmetry (its group is a subgroup of
/// the permutations of its dimensions, at most 8! = 40320 elements).
pub const MAX_PAIR_SYMMETRY_RANK: usize = 8;

/// The most irreducible representations (those of D2h).
pub const MAX_IRREPS: usize = 8;

const RANGE_ATTRS: [&str; 3] = ["tile", "spin", "irreps"];
const BLOCK_RULES: [&str; 3] = ["spin", "irrep", "tiles"];

fn unknown_attr(what: &str, name: &ast::Ident, known: &[&str], example: &str) -> Diagnostic {
    let hint = match super::scope::closest(&name.name, known.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None => {
            let list: Vec<String> = known.iter().map(|s| format!("`{s}`")).collect();
            format!("{what} attributes are {}, as in `{example}`", list.join(", "))
        }
    };
    Diagnostic::error(
        "E0405",
        format!("unknown {what} attribute `{}`", name.name),
        name.span.clone(),
        "not an attribute",
    )
    .with_hint(hint)
}

fn malformed(message: String, span: Span, label: &str, hint: &str) -> Diagnostic {
    Diagnostic::error("E0405", message, span, label).with_hint(hint)
}

impl Ctx {
    /// The attributes of `range NAME = SIZE …;` into `hir.ranges[r].tiling`; an
    /// attribute with an error is left out.
    pub(crate) fn range_tiling(&mut self, r: RangeId, d: &ast::RangeDecl) {
        let mut tiling = hir::Tiling::default();
        let mut tile_seen: Option<Span> = None;
        let mut sub_seen: Option<Span> = None;
        for a in &d.attrs {
            let attr = a.name.name.as_str();
            if !RANGE_ATTRS.contains(&attr) {
                self.error(unknown_attr("range", &a.name, &RANGE_ATTRS, "range V = 200 tile 40 spin(100, 100);"));
                continue;
            }
            let seen = if attr == "tile" { &mut tile_seen } else { &mut sub_seen };
            if let Some(first) = seen.clone() {
                let msg = if attr == "tile" {
                    format!("range `{}` has two tile sizes", d.name.name)
                } else {
                    format!("range `{}` has two sub-space splits", d.name.name)
                };
                self.error(
                    Diagnostic::error("E0405", msg, a.span.clone(), "given again here")
                        .with_label(first, "first given here")
                        .with_hint("a range has at most one `tile` and one of `spin(…)` or `irreps(…)`"),
                );
                continue;
            }
            *seen = Some(a.span.clone());
            match (attr, &a.args) {
                ("tile", ast::RangeArgs::Int(v)) => tiling.tile = self.tile_size(d, v),
                ("tile", ast::RangeArgs::List(_)) => self.error(malformed(
                    "`tile` takes one size".into(),
                    a.span.clone(),
                    "written as a list",
                    "write the tile size after the word, as in `range V = 200 tile 40;`",
                )),
                (_, ast::RangeArgs::Int(_)) => self.error(malformed(
                    format!("`{attr}` takes a list of sub-space sizes"),
                    a.span.clone(),
                    "a single number",
                    if attr == "spin" {
                        "give the sizes of the α and β blocks, as in `range V = 200 spin(100, 100);`"
                    } else {
                        "give the size of each irrep's block, as in `range V = 200 irreps(60, 40, 50, 50);`"
                    },
                )),
                (_, ast::RangeArgs::List(sizes)) => tiling.subspaces = self.subspaces(r, d, a, sizes),
            }
        }
        self.hir.ranges[r].tiling = tiling;
    }

    fn tile_size(&mut self, d: &ast::RangeDecl, v: &ast::IntLit) -> Option<usize> {
        match int_value(v) {
            IntVal::Ok(n) if n >= 1 => Some(n),
            IntVal::Ok(_) | IntVal::Negative => {
                self.error(
                    Diagnostic::error(
                        "E0406",
                        format!("the tile size of range `{}` must be ≥ 1", d.name.name),
                        v.span.clone(),
                        format!("tile size {}", int_text(v)),
                    )
                    .with_hint("a tile holds at least one index value; leave `tile` out to let tcc choose"),
                );
                None
            }
            IntVal::TooLarge => {
                self.error(too_large(v, &format!("the tile size of range `{}`", d.name.name)));
                None
            }
        }
    }

    fn subspaces(
        &mut self,
        r: RangeId,
        d: &ast::RangeDecl,
        a: &ast::RangeAttr,
        sizes: &[ast::IntLit],
    ) -> Option<hir::Subspaces> {
        let name = &d.name.name;
        let (kind, example) = if a.name.name == "spin" {
            (hir::SubspaceKind::Spin, format!("range {name} = 200 spin(100, 100);"))
        } else {
            (hir::SubspaceKind::Irrep, format!("range {name} = 200 irreps(60, 40, 50, 50);"))
        };
        if d.size.is_none() {
            let written: Option<Vec<usize>> =
                sizes.iter().map(|s| if let IntVal::Ok(n) = int_value(s) { Some(n) } else { None }).collect();
            let example = match written.filter(|v| !v.is_empty()) {
                Some(v) => format!(
                    "range {name} = {} {}({});",
                    v.iter().sum::<usize>(),
                    a.name.name,
                    v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
                ),
                None => example,
            };
            self.error(
                Diagnostic::error(
                    "E0409",
                    format!("range `{name}` has its size given at run time, so it cannot be split into sub-spaces"),
                    a.span.clone(),
                    "sub-spaces of a range of unknown size",
                )
                .with_hint(format!("give the range a fixed size, the sum of its sub-spaces: `{example}`")),
            );
            return None;
        }
        let count_ok = match kind {
            hir::SubspaceKind::Spin => sizes.len() == 2,
            hir::SubspaceKind::Irrep => (1..=MAX_IRREPS).contains(&sizes.len()),
        };
        if !count_ok {
            let (msg, hint) = match kind {
                hir::SubspaceKind::Spin => (
                    format!("`spin` needs exactly 2 sizes (α and β), found {}", sizes.len()),
                    format!("as in `{example}`"),
                ),
                hir::SubspaceKind::Irrep => (
                    format!("`irreps` needs 1 to {MAX_IRREPS} sizes, found {}", sizes.len()),
                    format!(
                        "one size per irreducible representation of an abelian point group (D2h has 8), as in `{example}`"
                    ),
                ),
            };
            self.error(Diagnostic::error("E0408", msg, a.span.clone(), "wrong number of sub-spaces").with_hint(hint));
            return None;
        }
        let mut values = Vec::with_capacity(sizes.len());
        for s in sizes {
            match int_value(s) {
                IntVal::Ok(n) => values.push(n),
                IntVal::Negative => {
                    self.error(
                        Diagnostic::error(
                            "E0407",
                            format!("a sub-space of range `{name}` has a negative size"),
                            s.span.clone(),
                            format!("size {}", int_text(s)),
                        )
                        .with_hint("sub-space sizes are counts of index values, ≥ 0"),
                    );
                    return None;
                }
                IntVal::TooLarge => {
                    self.error(too_large(s, "a sub-space size"));
                    return None;
                }
            }
        }
        let total = values.iter().try_fold(0usize, |acc, &n| acc.checked_add(n));
        let size = self.hir.ranges[r].size;
        if total != Some(size) {
            let sum = total.map_or("more than 2^64".to_string(), |t| t.to_string());
            let list: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            let mut diag = Diagnostic::error(
                "E0407",
                format!("the sub-spaces of range `{name}` add up to {sum}, but its size is {size}"),
                a.span.clone(),
                format!("{} = {sum}", list.join(" + ")),
            );
            if let Some(sz) = &d.size {
                diag = diag.with_label(sz.span.clone(), format!("size {size}"));
            }
            self.error(diag.with_hint(format!(
                "every index value of `{name}` belongs to exactly one sub-space; make the sizes add up to {size}"
            )));
            return None;
        }
        Some(hir::Subspaces { kind, sizes: values })
    }

    /// The position of dimension `id` of tensor `d`, or `None` after E0401.
    fn dim_position(&mut self, d: &ast::TensorDecl, id: &ast::Ident, what: &str) -> Option<usize> {
        let names: &[ast::Ident] = d.dims.as_deref().unwrap_or(&[]);
        if let Some(p) = names.iter().position(|n| n.name == id.name) {
            return Some(p);
        }
        let list: Vec<&str> = names.iter().map(|n| n.name.as_str()).collect();
        self.error(
            Diagnostic::error(
                "E0401",
                format!("`{}` is not a dimension of `{}`", id.name, d.name.name),
                id.span.clone(),
                "not among its indices",
            )
            .with_hint(format!("{what} names dimensions of `{}[{}]`", d.name.name, list.join(","))),
        );
        None
    }

    /// The pair groups `((p q)(r s))` of a tensor; a group with any error is left out.
    pub(crate) fn pair_symmetry(&mut self, d: &ast::TensorDecl, dims: &[RangeId]) -> Vec<hir::PairGroup> {
        let mut out = Vec::new();
        if d.dims.as_deref().unwrap_or(&[]).is_empty() {
            return out; // E0401 already said that a scalar has no symmetry.
        }
        for spec in &d.symmetry {
            let kind = match spec.kind {
                ast::SymKind::Symmetric => hir::SymKind::Symmetric,
                ast::SymKind::Antisymmetric => hir::SymKind::Antisymmetric,
            };
            for g in spec.groups.iter().filter(|g| g.is_pair()) {
                if let Some(members) = self.pair_group(d, dims, g) {
                    out.push(hir::PairGroup { kind, members });
                }
            }
        }
        out
    }

    fn pair_group(&mut self, d: &ast::TensorDecl, dims: &[RangeId], g: &ast::SymGroup) -> Option<Vec<Vec<usize>>> {
        let mut ok = true;
        if g.members.len() < 2 {
            self.error(
                Diagnostic::error(
                    "E0410",
                    "a pair symmetry needs at least two members",
                    g.span.clone(),
                    "only one member",
                )
                .with_hint("list the groups of dimensions exchanged as wholes, as in `symmetric((p q)(r s))`"),
            );
            ok = false;
        }
        let len = g.members[0].indices.len();
        if let Some(m) = g.members.iter().find(|m| m.indices.len() != len) {
            self.error(
                Diagnostic::error(
                    "E0410",
                    "the members of a pair symmetry have different lengths",
                    m.span.clone(),
                    count_indices(m.indices.len()),
                )
                .with_label(g.members[0].span.clone(), count_indices(len))
                .with_hint("members are exchanged as wholes, position by position: give each as many indices"),
            );
            ok = false;
        }
        let mut first_use: Vec<Option<Span>> = vec![None; dims.len()];
        let mut members = Vec::new();
        for m in &g.members {
            let mut positions = Vec::new();
            for id in &m.indices {
                let Some(p) = self.dim_position(d, id, "a pair symmetry") else {
                    ok = false;
                    continue;
                };
                if let Some(first) = first_use[p].clone() {
                    self.error(
                        Diagnostic::error(
                            "E0411",
                            format!("index `{}` is in more than one member of a pair symmetry", id.name),
                            id.span.clone(),
                            "named again here",
                        )
                        .with_label(first, "first named here")
                        .with_hint("the members of a pair symmetry are disjoint groups of dimensions"),
                    );
                    ok = false;
                    continue;
                }
                first_use[p] = Some(id.span.clone());
                positions.push(p);
            }
            members.push(positions);
        }
        if !ok {
            return None;
        }
        for (m, spec) in members.iter().zip(&g.members).skip(1) {
            for (k, (&a, &b)) in members[0].iter().zip(m).enumerate() {
                let (ra, rb) = (dims[a], dims[b]);
                if ra != rb && self.range_ok(ra) && self.range_ok(rb) {
                    let msg = format!(
                        "`{}` is over `{}` but `{}` is over `{}`",
                        g.members[0].indices[k].name,
                        self.range_name(ra),
                        spec.indices[k].name,
                        self.range_name(rb)
                    );
                    self.error(
                        Diagnostic::error(
                            "E0412",
                            "the members of a pair symmetry have different ranges",
                            spec.span.clone(),
                            msg,
                        )
                        .with_hint(
                            "exchanged members must have the same ranges in the same order, as `(p q)(r s)` with p, r and q, s over one range each",
                        ),
                    );
                    return None;
                }
            }
        }
        Some(members)
    }

    /// The group of a tensor's symmetries: E0416 when they contradict each other,
    /// E0417 when a tensor with pair symmetry has too many dimensions.
    pub(crate) fn check_symmetry_group(&mut self, d: &ast::TensorDecl, t: &hir::Tensor) -> Option<PermGroup> {
        if t.pair_symmetry.is_empty() {
            return None;
        }
        let span = d.symmetry.first().map_or(d.name.span.clone(), |s| s.span.clone());
        if t.dims.len() > MAX_PAIR_SYMMETRY_RANK {
            self.error(
                Diagnostic::error(
                    "E0417",
                    format!(
                        "pair symmetry is supported on tensors of at most {MAX_PAIR_SYMMETRY_RANK} dimensions; `{}` has {}",
                        d.name.name,
                        t.dims.len()
                    ),
                    span,
                    "pair symmetry here",
                )
                .with_hint("leave the pair symmetry out (the tensor is then stored with its other symmetries only)"),
            );
            return None;
        }
        let g = PermGroup::of(t);
        if g.is_contradictory() {
            self.error(
                Diagnostic::error(
                    "E0416",
                    format!("the symmetries of `{}` contradict each other", d.name.name),
                    span,
                    "some exchange of dimensions is both symmetric and antisymmetric",
                )
                .with_hint("only a zero tensor has these symmetries; check which groups are `symmetric` and which `antisymmetric`"),
            );
            return None;
        }
        Some(g)
    }

    /// The block rules of a tensor; a rule with any error is left out. `group` is the
    /// tensor's symmetry group when it has pair symmetry (else it is built here).
    pub(crate) fn block_rules(
        &mut self,
        d: &ast::TensorDecl,
        t: &hir::Tensor,
        group: Option<PermGroup>,
    ) -> Vec<hir::BlockRule> {
        let mut out = Vec::new();
        let names: &[ast::Ident] = d.dims.as_deref().unwrap_or(&[]);
        if names.is_empty() {
            if let Some(b) = d.blocks.first() {
                self.error(
                    Diagnostic::error(
                        "E0401",
                        format!("scalar `{}` cannot have block rules", d.name.name),
                        b.span.clone(),
                        "a scalar has no dimensions",
                    )
                    .with_hint("block rules say which elements of a tensor may be nonzero; remove it"),
                );
            }
            return Vec::new();
        }
        for b in &d.blocks {
            if let Some(rule) = self.block_rule(d, &t.dims, b) {
                out.push((rule, b.span.clone()));
            }
        }
        if out.is_empty() {
            return Vec::new();
        }
        let group = group.unwrap_or_else(|| PermGroup::of(t));
        let dim_names: Vec<String> = names.iter().map(|n| n.name.clone()).collect();
        let mut rules = Vec::new();
        for (rule, span) in out {
            if let Some(bad) = crate::symmetry::generators(t).into_iter().find(|(p, _)| !rule_invariant(&rule, p)) {
                let moved: Vec<&str> =
                    (0..bad.0.len()).filter(|&k| bad.0[k] != k).map(|k| dim_names[k].as_str()).collect();
                self.error(
                    Diagnostic::error(
                        "E0418",
                        format!("block rule of `{}` does not respect its symmetry", d.name.name),
                        span,
                        format!("exchanging {} changes which blocks this rule allows", moved.join(", ")),
                    )
                    .with_hint(
                        "a symmetric tensor's nonzero blocks map onto each other under its symmetry; state the rule for exchanged dimensions alike, as in `antisymmetric(a b)(i j) spin(a b | i j)`",
                    ),
                );
                continue;
            }
            if let hir::BlockRule::Tiles(tiles) = &rule {
                if let Some(missing) = tiles.iter().find_map(|c| {
                    group.elements().iter().map(|(p, _)| PermGroup::apply(p, c)).find(|img| !tiles.contains(img))
                }) {
                    let coord = missing.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
                    self.error(
                        Diagnostic::error(
                            "E0418",
                            format!("block rule of `{}` does not respect its symmetry", d.name.name),
                            span,
                            format!("tile [{coord}] is the image of a listed tile but not listed"),
                        )
                        .with_hint(format!(
                            "list every tile that the tensor's symmetry maps a nonzero tile to: add [{coord}]"
                        )),
                    );
                    continue;
                }
            }
            rules.push(rule);
        }
        rules
    }

    fn block_rule(&mut self, d: &ast::TensorDecl, dims: &[RangeId], b: &ast::BlockSpec) -> Option<hir::BlockRule> {
        let rule = b.name.name.as_str();
        if !BLOCK_RULES.contains(&rule) {
            self.error(unknown_attr("tensor", &b.name, &BLOCK_RULES, "antisymmetric(a b)(i j) spin(a b | i j)"));
            return None;
        }
        match (rule, &b.body) {
            ("spin", ast::BlockBody::Names { upper, lower: Some(lower) }) => {
                let (up, low) = (self.rule_positions(d, dims, upper, b)?, self.rule_positions(d, dims, lower, b)?);
                if let Some(p) = up.iter().find(|p| low.contains(p)) {
                    let names: &[ast::Ident] = d.dims.as_deref().unwrap_or(&[]);
                    self.error(
                        Diagnostic::error(
                            "E0414",
                            format!("index `{}` is named twice in a block rule", names[*p].name),
                            b.span.clone(),
                            "on both sides of `|`",
                        )
                        .with_hint("each dimension is on one side of a spin rule, as in `spin(a b | i j)`"),
                    );
                    return None;
                }
                self.rule_subspaces(
                    d,
                    dims,
                    &up.iter().chain(&low).copied().collect::<Vec<_>>(),
                    b,
                    hir::SubspaceKind::Spin,
                )?;
                Some(hir::BlockRule::Spin { upper: up, lower: low })
            }
            ("irrep", ast::BlockBody::Names { upper, lower: None }) => {
                let positions = self.rule_positions(d, dims, upper, b)?;
                self.rule_subspaces(d, dims, &positions, b, hir::SubspaceKind::Irrep)?;
                Some(hir::BlockRule::Irrep { positions })
            }
            ("tiles", ast::BlockBody::Coords(coords)) => {
                let mut tiles = Vec::new();
                for c in coords {
                    let mut coord = Vec::new();
                    for x in c {
                        match int_value(x) {
                            IntVal::Ok(n) if !x.negative || n == 0 => coord.push(n),
                            IntVal::TooLarge => {
                                self.error(too_large(x, "a tile coordinate"));
                                return None;
                            }
                            _ => {
                                self.error(
                                    Diagnostic::error(
                                        "E0415",
                                        "a tile coordinate is negative",
                                        x.span.clone(),
                                        format!("coordinate {}", int_text(x)),
                                    )
                                    .with_hint("tiles are counted from 0 along each dimension"),
                                );
                                return None;
                            }
                        }
                    }
                    if coord.len() != dims.len() {
                        let span = c.first().zip(c.last()).map_or(b.span.clone(), |(f, l)| f.span.start..l.span.end);
                        self.error(
                            Diagnostic::error(
                                "E0415",
                                format!(
                                    "a tile of `{}` needs {} coordinates, one per dimension; found {}",
                                    d.name.name,
                                    dims.len(),
                                    coord.len()
                                ),
                                span,
                                format!("{} coordinates", coord.len()),
                            )
                            .with_hint(format!(
                                "write each tile as [{}]",
                                (0..dims.len()).map(|_| "0").collect::<Vec<_>>().join(",")
                            )),
                        );
                        return None;
                    }
                    if !tiles.contains(&coord) {
                        tiles.push(coord);
                    }
                }
                Some(hir::BlockRule::Tiles(tiles))
            }
            ("spin", _) => {
                self.error(malformed(
                    "a spin rule needs `|` between its upper and lower indices".into(),
                    b.span.clone(),
                    "no `|`",
                    "as many α indices above as below the bar, as in `spin(a b | i j)`",
                ));
                None
            }
            ("irrep", _) => {
                self.error(malformed(
                    "an irrep rule is a list of index names".into(),
                    b.span.clone(),
                    "not a list of names",
                    "the product of the irreps of the named indices is totally symmetric, as in `irrep(p q r s)`",
                ));
                None
            }
            _ => {
                self.error(malformed(
                    "`tiles` is a list of tile coordinates".into(),
                    b.span.clone(),
                    "not a list of coordinates",
                    "list the nonzero tiles, one coordinate per dimension, as in `tiles[[0,1], [1,0]]`",
                ));
                None
            }
        }
    }

    /// The positions of the names of a spin or irrep rule; `None` after E0401/E0414.
    fn rule_positions(
        &mut self,
        d: &ast::TensorDecl,
        _dims: &[RangeId],
        ids: &[ast::Ident],
        b: &ast::BlockSpec,
    ) -> Option<Vec<usize>> {
        let mut out: Vec<usize> = Vec::new();
        let mut ok = true;
        for id in ids {
            let Some(p) = self.dim_position(d, id, &format!("a `{}` rule", b.name.name)) else {
                ok = false;
                continue;
            };
            if out.contains(&p) {
                self.error(
                    Diagnostic::error(
                        "E0414",
                        format!("index `{}` is named twice in a block rule", id.name),
                        id.span.clone(),
                        "named again here",
                    )
                    .with_hint("name each dimension at most once in a rule"),
                );
                ok = false;
                continue;
            }
            out.push(p);
        }
        ok.then_some(out)
    }

    /// E0413 unless every position's range has sub-spaces of `kind`.
    fn rule_subspaces(
        &mut self,
        d: &ast::TensorDecl,
        dims: &[RangeId],
        positions: &[usize],
        b: &ast::BlockSpec,
        kind: hir::SubspaceKind,
    ) -> Option<()> {
        let names: &[ast::Ident] = d.dims.as_deref().unwrap_or(&[]);
        for &p in positions {
            let r = dims[p];
            if !self.range_ok(r) {
                return None;
            }
            let range = &self.hir.ranges[r];
            if range.tiling.subspaces.as_ref().map(|s| s.kind) != Some(kind) {
                let (attr, example) = match kind {
                    hir::SubspaceKind::Spin => ("spin", format!("range {} = … spin(NA, NB);", range.name)),
                    hir::SubspaceKind::Irrep => ("irreps", format!("range {} = … irreps(N0, N1, …);", range.name)),
                };
                let rule = if kind == hir::SubspaceKind::Spin { "spin" } else { "irrep" };
                let id = names.iter().find(|n| names.iter().position(|m| m.name == n.name) == Some(p));
                let id = id.map_or(&b.name, |i| i);
                let span = find_in(b, &id.name).unwrap_or(b.span.clone());
                let range_span = range.span.clone();
                let range_name = range.name.clone();
                self.error(
                    Diagnostic::error(
                        "E0413",
                        format!(
                            "a `{rule}` rule names `{}`, whose range `{range_name}` has no `{attr}` sub-spaces",
                            id.name
                        ),
                        span,
                        format!("over `{range_name}`"),
                    )
                    .with_label(range_span, format!("`{range_name}` declared here without `{attr}(…)`"))
                    .with_hint(format!("declare the range with its sub-spaces, as in `{example}`")),
                );
                return None;
            }
        }
        Some(())
    }
}

fn count_indices(n: usize) -> String {
    if n == 1 {
        "1 index here".to_string()
    } else {
        format!("{n} indices here")
    }
}

/// The span of the name `name` inside a block spec.
fn find_in(b: &ast::BlockSpec, name: &str) -> Option<Span> {
    match &b.body {
        ast::BlockBody::Names { upper, lower } => {
            upper.iter().chain(lower.iter().flatten()).find(|i| i.name == name).map(|i| i.span.clone())
        }
        ast::BlockBody::Coords(_) => None,
    }
}

/// Whether a spin or irrep rule says the same after permuting dimensions by `perm`
/// (`perm[k]` is the dimension whose value lands in dimension `k`). `tiles` rules
/// are checked on coordinates instead.
fn rule_invariant(rule: &hir::BlockRule, perm: &[usize]) -> bool {
    let image = |ps: &[usize]| {
        let mut v: Vec<usize> = ps.iter().map(|&p| perm.iter().position(|&q| q == p).unwrap_or(p)).collect();
        v.sort_unstable();
        v
    };
    let sorted = |ps: &[usize]| {
        let mut v = ps.to_vec();
        v.sort_unstable();
        v
    };
    match rule {
        hir::BlockRule::Spin { upper, lower } => {
            let (u, l) = (image(upper), image(lower));
            let (u0, l0) = (sorted(upper), sorted(lower));
            (u == u0 && l == l0) || (u == l0 && l == u0)
        }
        hir::BlockRule::Irrep { positions } => image(positions) == sorted(positions),
        hir::BlockRule::Tiles(_) => true,
    }
}
