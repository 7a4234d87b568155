/* The mgpu book's small additions to the themes' behaviour (loaded on every page by conf.py):
 * tooltips that do not stick, a language switch that keeps the section, and tables that show
 * that they scroll. */
"use strict";

/* Tooltips that do not stick.
 *
 * pydata-sphinx-theme gives every [data-bs-toggle="tooltip"] a Bootstrap tooltip with
 * Bootstrap's default trigger, "hover focus". On a touch screen a tap is both the hover and the
 * focus: the tooltip opens and stays over the page until the reader taps elsewhere. With a
 * mouse, a click focuses the button and its tooltip stays while the focus does (the book theme
 * blurs only the first button of each kind, which since pydata-sphinx-theme 0.17 was a hidden
 * one). So: on a device that cannot hover (a phone or tablet) there are no tooltips (the
 * buttons keep their aria-label); elsewhere a click hides the tooltip and drops the focus, and
 * keyboard focus (Tab) still shows it.
 */
function mgpuTooltips() {
  if (!window.bootstrap || !window.bootstrap.Tooltip) {
    return;
  }
  const canHover = window.matchMedia("(hover: hover)").matches;
  document.querySelectorAll('[data-bs-toggle="tooltip"]').forEach((el) => {
    const tip = window.bootstrap.Tooltip.getInstance(el);
    if (!tip) {
      return;
    }
    if (!canHover) {
      tip.hide();
      tip.disable();
      return;
    }
    el.addEventListener("click", (event) => {
      tip.hide();
      if (event.detail > 0 && typeof el.blur === "function") {
        el.blur(); // a pointer click, not Enter or Space from the keyboard
      }
    });
  });
  if (!canHover) {
    // pydata-sphinx-theme enables the colour switcher's tooltip again when its menu closes.
    const themeSwitch = document.querySelector(".theme-switch-container");
    if (themeSwitch) {
      themeSwitch.addEventListener("hide.bs.dropdown", () => {
        const tip = window.bootstrap.Tooltip.getInstance(themeSwitch);
        if (tip) {
          setTimeout(() => tip.disable(), 0);
        }
      });
    }
  }
}

/* The language switch keeps the section.
 *
 * The switch (_templates/lang-switch.html) links to the same page of the other edition; both
 * editions give a section the same id (Sphinx takes ids from the English source). When the
 * reader follows it, the link gets the id of the section being read: the one named in the
 * address if its heading is on screen, else the last section whose heading has scrolled up to
 * the top of the window.
 */
function mgpuSectionInView() {
  const header = document.querySelector(".bd-header-article");
  const top = (header ? header.getBoundingClientRect().bottom : 0) + 0.1 * window.innerHeight;
  const named = window.location.hash ? document.getElementById(
    decodeURIComponent(window.location.hash.slice(1))) : null;
  if (named) {
    const at = named.getBoundingClientRect().top;
    if (at > -10 && at < window.innerHeight / 2) {
      return named.id;
    }
  }
  let current = null;
  document.querySelectorAll("article.bd-article section[id]").forEach((section) => {
    const heading = section.querySelector(":scope > h1, :scope > h2, :scope > h3, :scope > h4");
    if ((heading || section).getBoundingClientRect().top <= top) {
      current = section.id;
    }
  });
  return window.scrollY > 0 ? current : null;
}

function mgpuLanguageSwitch() {
  document.querySelectorAll("a.mgpu-lang-switch").forEach((link) => {
    const follow = () => {
      const id = mgpuSectionInView();
      link.href = link.href.split("#")[0] + (id ? "#" + encodeURIComponent(id) : "");
    };
    link.addEventListener("click", follow);
    link.addEventListener("auxclick", follow);
    link.addEventListener("contextmenu", follow);
  });
}

/* Tables that scroll sideways say so: the box's edges that have more columns fade out
 * (mgpu.css). The classes follow the reader's scrolling and the window's width. */
const MGPU_SCROLLERS = ".pst-scrollable-table-container, div.cell_output .output.text_html";

function mgpuScrollCues() {
  const update = (box) => {
    const more = box.scrollWidth - box.clientWidth > 1;
    box.classList.toggle("mgpu-more-left", more && box.scrollLeft > 1);
    box.classList.toggle("mgpu-more-right",
      more && box.scrollLeft + box.clientWidth < box.scrollWidth - 1);
  };
  const boxes = document.querySelectorAll(MGPU_SCROLLERS);
  boxes.forEach((box) => {
    update(box);
    box.addEventListener("scroll", () => update(box), { passive: true });
  });
  if (window.ResizeObserver) {
    const observer = new ResizeObserver((entries) => entries.forEach((e) => update(e.target)));
    boxes.forEach((box) => observer.observe(box));
  } else {
    window.addEventListener("resize", () => boxes.forEach(update));
  }
}

/* The themes set up their tooltips when their deferred scripts run; DOMContentLoaded comes
 * after every deferred script. */
function mgpuReady() {
  mgpuTooltips();
  mgpuLanguageSwitch();
  mgpuScrollCues();
}
if (document.readyState === "loading" || document.readyState === "interactive") {
  document.addEventListener("DOMContentLoaded", mgpuReady);
} else {
  mgpuReady();
}
