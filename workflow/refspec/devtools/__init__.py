"""Development tools, not part of what a run does: the code checks of ``refspec lint`` (``lint``), the
package's import contract (``contract``) and the glossary check (``glossary``). They read the source
with :mod:`ast` and import nothing of the package they check."""
