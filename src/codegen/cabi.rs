//! C header and Fortran module (filled in below).
