"""The report's renderer, standard library only and nothing of refspec: carried by the checker, which
renders every archive again with it (:mod:`refspec_check.rendering`), and imported by the pipeline, which
writes every report with it (``refspec.reporting.render``).

The data model, the number registry and archive loading (``document``), SVG figures (``svg``), TeX
text (``tex``), the device facts (``device``), the sections in one module per group (``sections``),
the rules and aggregates the report states (``vacuity``, ``aggregates``), the comparison report
(``comparison``), and the assembly into HTML, TeX and numbers.json with the renderer's version
(``render``)."""
