"""Request processors: opt-in steps around a completion (redaction, guards, spellcheck, routing policy).

`base.py` is the interface and registry, `spec.py` reads which ones a request runs, `chain.py` runs them as
the pipeline's `ProcessorRun`; each processor is one module. See docs/processors.md.
"""
