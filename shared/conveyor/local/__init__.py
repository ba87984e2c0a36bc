"""The local runtime: the declared platform on one machine, with moto as the embedded AWS."""
