"""memcalc measure: run the same model for real and count its bytes. Imports torch."""
