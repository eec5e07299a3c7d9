"""The equivalence certificate: its pairs, its making, a script's, and the matrix's cache."""
