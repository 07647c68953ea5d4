// The site's search for a reader of one language at a time, with summaries as they read them.
//
// Every page remembers the language it is in (es/... is Spanish); the search page then lists
// only the pages of that language (?lang=en or ?lang=es chooses), and its summaries leave out
// the TeX source of formulas, which MathJax typesets on the pages but not in the summaries.
// Loaded with defer: it runs after searchtools.js (a plain script of the search page) has
// defined Search, and before the search itself, which waits for the page to be parsed.
(() => {
  const KEY = "normlab-language";
  const rootPath = new URL(document.documentElement.dataset.content_root || "./", location.href)
    .pathname;
  const page = location.pathname.startsWith(rootPath)
    ? decodeURIComponent(location.pathname.slice(rootPath.length))
    : "";
  const remember = (language) => {
    try {
      localStorage.setItem(KEY, language);
    } catch (error) {
      // file:// pages in some browsers: the search then shows English pages
    }
  };
  if (page !== "search.html") {
    remember(page.startsWith("es/") ? "es" : "en");
    return;
  }
  if (typeof Search === "undefined") return;
  let language = new URLSearchParams(location.search).get("lang");
  if (language !== "es" && language !== "en") {
    try {
      language = localStorage.getItem(KEY) || "en";
    } catch (error) {
      language = "en";
    }
  }
  const spanish = (docName) => docName.startsWith("es/");
  const perform = Search._performSearch;
  Search._performSearch = (...args) =>
    perform(...args).filter((item) => spanish(item[0]) === (language === "es"));
  const toText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const parsed = new DOMParser().parseFromString(htmlString, "text/html");
    parsed.querySelectorAll(".math, mjx-container").forEach((formula) => {
      formula.replaceWith(parsed.createTextNode(" … "));
    });
    return toText(parsed.documentElement.outerHTML, anchor);
  };
})();
