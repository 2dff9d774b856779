"""The report: the data model, the number registry and archive loading (``document``), SVG
figures (``svg``), TeX text (``tex``), the device facts (``device``), the sections in one module
per group (``sections``), and the assembly into HTML, TeX/PDF and numbers.json (``render``).
The ``refspec report`` command is :mod:`refspec.commands.report`."""
