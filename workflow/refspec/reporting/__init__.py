"""The report: the data model and archive loading (``model``), SVG figures (``svg``), TeX text
(``tex``), the campaign and result sections (``sections``), the state and admission sections
(``state``), and the assembly into HTML, TeX/PDF and numbers.json with the command (``render``)."""
