"""BridgeQA-v0: sequential retrieval (the study's category C)."""

from __future__ import annotations

from typing import ClassVar

from passkt.envs.qa import QAEnv, qa_docstring

__all__ = ["BridgeQAEnv"]


class BridgeQAEnv(QAEnv):
    __doc__ = qa_docstring(
        "Answer a bridge question: each search reveals the name needed for the next one.",
        """\
A multi-hop question ("Which city was the director of the film X born in?") whose answer lies
``depth`` paragraphs away: the entity of hop i+1 is named only in the paragraph of hop i, so
the agent must search, read, and search again. The search tool is BM25 over the task's own
paragraphs (gold and distractors, the HotpotQA distractor setting); ``corpus=`` and
``retriever=`` select an open-domain setting instead (one global corpus, a saved
million-paragraph index, or live Wikipedia). The synthetic source (default) builds a
fictional world that no pretrained model knows, with ``hops`` = 2, 3 or 4 and a known minimum
depth T*.""",
        category="bridge",
        hops=True,
    )

    category = "bridge"
    takes_hops: ClassVar[bool] = True
