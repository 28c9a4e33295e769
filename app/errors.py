"""What the page raises to show a message: a gr.Error that Gradio does not print a traceback for.

Gradio prints the traceback of every gr.Error a handler raises to the server log (17 of them for
17 bad fields in one walk through the page). A message the page shows is for the user, not a
server fault; a failure that is one is logged with its traceback by live.failure_message."""
from __future__ import annotations

import gradio as gr


def page_error(message: str) -> gr.Error:
    return gr.Error(message, print_exception=False)
