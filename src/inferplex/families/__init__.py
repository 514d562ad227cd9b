"""Endpoint families: chat, embeddings, token counting now; images, speech, transcription, video, responses
and batches next. Each is declared once, in its own module here, as a `Family`: the model type that serves
it, the optional adapter interface a provider implements to serve it, and how its requests are metered (its
pricing unit and worst-case estimates). The pipeline runs every family on one path (resolve, admit, route,
settle); `registry.check_adapters` refuses at start-up a model deployed on a provider that cannot serve it.
"""
