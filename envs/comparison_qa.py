"""ComparisonQA-v0: independent retrieval (the study's category B)."""

from __future__ import annotations

from passkt.envs.qa import QAEnv, qa_docstring

__all__ = ["ComparisonQAEnv"]


class ComparisonQAEnv(QAEnv):
    __doc__ = qa_docstring(
        "Answer a comparison question about two entities that can be looked up independently.",
        """\
A question such as "Which film came out first, X or Y?" or "Were A and B born in the same
country?". Both entities are named in the question, so the two lookups do not depend on each
other (minimum depth 2, in either order). The search tool is BM25 over the task's own
paragraphs (gold and distractors); ``corpus=`` and ``retriever=`` select an open-domain
setting instead (one global corpus, a saved million-paragraph index, or live Wikipedia).
The synthetic source (default) builds a fictional world that no pretrained model knows.""",
        category="comparison",
        hops=False,
    )

    category = "comparison"
