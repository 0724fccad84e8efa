"""Guardians: the AOS client that asks one for decisions, and the reference guardian server (``.server``)."""
