//! The abstract syntax tree: exactly what the user wrote, with a span on every node.
//!
//! Literals are kept as text; their values are checked in `sema`, so that an
//! overflowing or malformed literal becomes a diagnostic instead of a parse failure.

use super::lexer::Span;

/// A name as written, with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// An integer literal with an optional leading minus (so `grid G[-2]` can get a
/// semantic error with a hint rather than a syntax error).
#[derive(Debug, Clone, PartialEq)]
pub struct IntLit {
    pub negative: bool,
    pub text: String,
    pub span: Span,
}

/// A numeric literal (integer or real) used as a scalar factor.
#[derive(Debug, Clone, PartialEq)]
pub struct NumLit {
    pub text: String,
    pub span: Span,
}

/// A whole source file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct File {
    pub items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Range(RangeDecl),
    Index(IndexDecl),
    Tensor(TensorDecl),
    Stmt(Stmt),
    Grid(GridDecl),
    Distribute(DistributeDecl),
    Program(ProgramBlock),
    Model(ModelBlock),
    /// A stretch of input the parser skipped after a syntax error (already reported).
    Error(Span),
}

impl Item {
    pub fn span(&self) -> Span {
        match self {
            Item::Range(d) => d.span.clone(),
            Item::Index(d) => d.span.clone(),
            Item::Tensor(d) => d.span.clone(),
            Item::Stmt(d) => d.span.clone(),
            Item::Grid(d) => d.span.clone(),
            Item::Distribute(d) => d.span.clone(),
            Item::Program(d) => d.span.clone(),
            Item::Model(d) => d.span.clone(),
            Item::Error(s) => s.clone(),
        }
    }
}

/// `range N = 64;`, or `range N;` (size given when the program runs), optionally
/// followed by tiling attributes: `range V = 200 tile 40 spin(100, 100);`.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeDecl {
    pub name: Ident,
    /// `None` for `range N;`: a size given at run time.
    pub size: Option<IntLit>,
    /// `tile 40`, `spin(100, 100)`, `irreps(60, 40, 50, 50)`, in the order written.
    /// The attribute names are not keywords: `sema` checks them.
    pub attrs: Vec<RangeAttr>,
    /// `range P = O + V;`: the ranges whose union (in this order) `P` is; empty
    /// for a plain range.
    pub parts: Vec<Ident>,
    pub span: Span,
}

/// One attribute of a range declaration: a name and its argument(s).
#[derive(Debug, Clone, PartialEq)]
pub struct RangeAttr {
    pub name: Ident,
    pub args: RangeArgs,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RangeArgs {
    /// `tile 40`
    Int(IntLit),
    /// `spin(100, 100)`
    List(Vec<IntLit>),
}

/// `index p, q, r : N;`
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDecl {
    pub names: Vec<Ident>,
    pub range: Ident,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleKind {
    Input,
    Output,
    Temporary,
    /// Model weights (only meaningful inside `model` blocks).
    Param,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Role {
    pub kind: RoleKind,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemKind {
    F32,
    F64,
    /// Complex of two `f32`.
    C64,
    /// Complex of two `f64`.
    C128,
    /// bfloat16 storage, f32 arithmetic.
    BF16,
    /// IEEE half storage, f32 arithmetic.
    F16,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ElemType {
    pub kind: ElemKind,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymKind {
    Symmetric,
    Antisymmetric,
}

/// `symmetric(p q)(r s)`: one keyword, one or more groups of index names.
#[derive(Debug, Clone, PartialEq)]
pub struct SymSpec {
    pub kind: SymKind,
    pub groups: Vec<SymGroup>,
    pub span: Span,
}

/// `(p q)`, or a pair group `((p q)(r s))` exchanging its members as wholes.
#[derive(Debug, Clone, PartialEq)]
pub struct SymGroup {
    /// Every index named in the group, in order (for a pair group, the members'
    /// indices one after the other).
    pub indices: Vec<Ident>,
    /// Non-empty for a pair group: its members `(p q)`, `(r s)` (each with empty
    /// `members`).
    pub members: Vec<SymGroup>,
    pub span: Span,
}

impl SymGroup {
    pub fn is_pair(&self) -> bool {
        !self.members.is_empty()
    }
}

/// A block-sparsity attribute of a tensor: `spin(a b | i j)`, `irrep(p q r s)` or
/// `tiles[[0,1], [1,0]]`. The name is not a keyword: `sema` checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockSpec {
    pub name: Ident,
    pub body: BlockBody,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BlockBody {
    /// `(a b | i j)` or `(p q r s)` (`lower` is `None` without a `|`).
    Names { upper: Vec<Ident>, lower: Option<Vec<Ident>> },
    /// `[[0,1], [1,0]]`
    Coords(Vec<Vec<IntLit>>),
}

/// `input tensor A[p,q,r,s] : f64 symmetric(p q)(r s);` — the role may be omitted
/// (a temporary), as may the brackets (a scalar) and the element type.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDecl {
    pub role: Option<Role>,
    pub name: Ident,
    /// `None` when written without brackets (a scalar).
    pub dims: Option<Vec<Ident>>,
    pub elem: Option<ElemType>,
    pub symmetry: Vec<SymSpec>,
    /// Block-sparsity attributes, after the symmetry specs.
    pub blocks: Vec<BlockSpec>,
    pub span: Span,
}

/// `A[p,q]` or, for a scalar, `E`.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRef {
    pub name: Ident,
    /// `None` when written without brackets.
    pub indices: Option<Vec<Ident>>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignOp {
    /// `=`
    Assign,
    /// `+=`
    AddAssign,
}

/// `R[a,b,i,j] += 0.25 * T2[a,b,k,l] * V[k,l,c,d] * T2[c,d,i,j];`
#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub lhs: TensorRef,
    pub op: AssignOp,
    pub op_span: Span,
    pub rhs: Expr,
    pub span: Span,
}

/// A sum of terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub terms: Vec<Term>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign {
    Plus,
    Minus,
}

/// One signed product: `- 0.5 * C[i,k] * D[k,j] / 2`.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub sign: Sign,
    /// The factors; the first is always multiplied, the rest by `*` or `/`.
    pub factors: Vec<(MulOp, Factor)>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MulOp {
    Mul,
    Div,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Factor {
    Number(NumLit),
    Tensor(TensorRef),
    /// An element-wise function of a sub-expression: `relu(H[t,m] * W1[x,m,f])`.
    /// Indices used only inside the argument are summed inside it.
    Call {
        func: Ident,
        arg: Box<Expr>,
        span: Span,
    },
    /// A parenthesised sum: `A[i,k] * (B[k,j] + C[k,j])`.
    Paren {
        expr: Box<Expr>,
        span: Span,
    },
    /// A call of several arguments, or of a comparison: `where(X[i] > 0, X[i], 0)`,
    /// `softmax(L[b,v], v)`, `max(A[i], B[i])`.
    Apply {
        func: Ident,
        args: Vec<Arg>,
        span: Span,
    },
    /// A tensor with at least one subscript that is not a plain index name:
    /// `I[n,c,y+r,x+s]`, `X[2*t+1]`. Whether it is affine is checked in `sema`.
    Affine(AffineRef),
}

/// `I[n,c,y+r,x+s]`: a tensor read at integer expressions of indices.
#[derive(Debug, Clone, PartialEq)]
pub struct AffineRef {
    pub name: Ident,
    pub subs: Vec<SubExpr>,
    pub span: Span,
}

/// One subscript as written: integer arithmetic on index names and literals.
/// Sums and products are flat lists, so only parentheses nest (bounded by the
/// parser's `MAX_NESTING`): `x+0+0+…` does not make a deep tree.
#[derive(Debug, Clone, PartialEq)]
pub enum SubExpr {
    Name(Ident),
    Int(IntLit),
    /// `a + b - c`, `-a`: the terms in order, each with whether it is subtracted.
    Sum {
        terms: Vec<(bool, SubExpr)>,
        span: Span,
    },
    /// `2*x`: the factors in order.
    Product {
        factors: Vec<SubExpr>,
        span: Span,
    },
    Paren {
        arg: Box<SubExpr>,
        span: Span,
    },
}

impl SubExpr {
    pub fn span(&self) -> Span {
        match self {
            SubExpr::Name(n) => n.span.clone(),
            SubExpr::Int(i) => i.span.clone(),
            SubExpr::Sum { span, .. } | SubExpr::Product { span, .. } | SubExpr::Paren { span, .. } => span.clone(),
        }
    }
}

/// One argument of [`Factor::Apply`]: an expression, or a comparison of two.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub expr: Expr,
    pub cmp: Option<(CmpOp, Expr)>,
    pub span: Span,
}

/// `<`, `<=`, `>`, `>=`, `==`, `!=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        }
    }
    /// The comparison of two values (false when either is NaN, except `!=`).
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
        }
    }
}

impl Factor {
    pub fn span(&self) -> Span {
        match self {
            Factor::Number(n) => n.span.clone(),
            Factor::Tensor(t) => t.span.clone(),
            Factor::Affine(a) => a.span.clone(),
            Factor::Call { span, .. } | Factor::Paren { span, .. } | Factor::Apply { span, .. } => span.clone(),
        }
    }
}

/// `grid G[4, 4, 2];`
#[derive(Debug, Clone, PartialEq)]
pub struct GridDecl {
    pub name: Ident,
    pub dims: Vec<IntLit>,
    pub span: Span,
}

/// `distribute T2[a,b,i,j] over G as [a:0, b:1];`
#[derive(Debug, Clone, PartialEq)]
pub struct DistributeDecl {
    pub tensor: TensorRef,
    pub grid: Ident,
    pub mapping: Vec<(Ident, IntLit)>,
    pub span: Span,
}

/// `program name { statements }`: a named group of statements over the file's tensors
/// (one exported function per program in generated libraries).
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramBlock {
    pub name: Ident,
    pub items: Vec<Item>,
    pub span: Span,
}

/// `model name { dims ...; index ...; tensors; layer ...; parallel { ... } }`
#[derive(Debug, Clone, PartialEq)]
pub struct ModelBlock {
    pub name: Ident,
    pub items: Vec<ModelItem>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ModelItem {
    Dims(DimsDecl),
    Index(IndexDecl),
    Tensor(TensorDecl),
    Layer(LayerBlock),
    Parallel(ParallelBlock),
    Error(Span),
}

impl ModelItem {
    pub fn span(&self) -> Span {
        match self {
            ModelItem::Dims(d) => d.span.clone(),
            ModelItem::Index(d) => d.span.clone(),
            ModelItem::Tensor(d) => d.span.clone(),
            ModelItem::Layer(d) => d.span.clone(),
            ModelItem::Parallel(d) => d.span.clone(),
            ModelItem::Error(s) => s.clone(),
        }
    }
}

/// `dims batch = 8, seq = 4096;` — each dim is a range local to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct DimsDecl {
    pub dims: Vec<(Ident, IntLit)>,
    pub span: Span,
}

/// `layer attention { statements }`
#[derive(Debug, Clone, PartialEq)]
pub struct LayerBlock {
    pub name: Ident,
    /// Statements (and recovered `Item::Error`s); nothing else parses here.
    pub items: Vec<Item>,
    pub span: Span,
}

/// `parallel { data = 8; tensor = 4 on hidden; sequence = ulysses(4); zero = 3; }`
#[derive(Debug, Clone, PartialEq)]
pub struct ParallelBlock {
    pub entries: Vec<ParallelEntry>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParallelEntry {
    pub key: Ident,
    pub value: ParallelValue,
    /// `on hidden`: the model dimension the strategy splits.
    pub on: Option<Ident>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ParallelValue {
    /// `8`
    Int(IntLit),
    /// `ulysses(4)`
    Call { func: Ident, arg: IntLit, span: Span },
    /// `ring`, `on`, ... a bare word.
    Name(Ident),
}

impl ParallelValue {
    pub fn span(&self) -> Span {
        match self {
            ParallelValue::Int(i) => i.span.clone(),
            ParallelValue::Call { span, .. } => span.clone(),
            ParallelValue::Name(n) => n.span.clone(),
        }
    }
}
