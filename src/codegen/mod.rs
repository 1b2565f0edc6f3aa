//! Code generation: preparing the program ([`lower`]), the CPU back end through
//! LLVM ([`llvm`]) and the C header / Fortran module of generated libraries
//! ([`cabi`]).

pub mod cabi;
pub mod llvm;
pub mod lower;
